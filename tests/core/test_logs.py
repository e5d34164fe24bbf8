"""Logs: no secrets (connection URLs, Redis passwords), the turn's ids on its lines, JSON
lines from real processes, no message bodies, and a plain `celery -A tasks worker` that
says it is ready and logs each turn at GATEWAY_LOG_LEVEL."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.core.logs import (
    JsonFormatter,
    KeyValueFormatter,
    RedactSecrets,
    TurnFields,
    dress_handlers,
    formatter_for,
    masked_url,
    redact_handlers,
    turn_context,
)
from gateway.ops.processes import GatewayProcess, wait_until
from tests.conftest import Rig
from tests.test_cancel import reply_of


def test_long_connection_url_secrets_are_masked() -> None:
    record = logging.LogRecord("Lark", logging.INFO, __file__, 1, "connected to %s", (
        "wss://msg-frontier.feishu.cn/ws/v2?device_id=1&access_key=abc123&service_id=2"
        "&ticket=t-xyz",), None)
    assert RedactSecrets().filter(record)
    line = record.getMessage()
    assert "abc123" not in line and "t-xyz" not in line
    assert "access_key=***" in line and "ticket=***" in line and "device_id=1" in line


ENDPOINT_CALL = ('POST /callback/ws/endpoint {"AppID": "cli_x", "AppSecret": "SECRETAPP"} '
                 "headers={'Authorization': 'Bearer SECRETDICT'} Authorization: Bearer "
                 "SECRETHEADER, retry with authorization=Bearer SECRETKV&x=1")
ENDPOINT_CALL_MASKED = ('POST /callback/ws/endpoint {"AppID": "cli_x", "AppSecret": "***"} '
                        "headers={'Authorization': 'Bearer ***'} Authorization: Bearer ***, "
                        "retry with authorization=Bearer ***&x=1")


@pytest.mark.parametrize("through", ["filter", "json", "text"])
def test_the_app_secret_and_a_bearer_token_are_masked(through: str) -> None:
    record = logging.LogRecord("gateway.test", logging.WARNING, __file__, 1, "%s",
                               (ENDPOINT_CALL,), None)
    if through == "filter":
        assert RedactSecrets().filter(record)
        line = record.getMessage()
    elif through == "json":
        line = json.loads(JsonFormatter().format(record))["msg"]
    else:
        line = KeyValueFormatter().format(record).split(": ", 1)[1]
    assert line == ENDPOINT_CALL_MASKED


def test_redis_password_is_masked() -> None:
    assert masked_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_a_password_in_a_urls_query_is_masked_too() -> None:
    assert masked_url("redis://host:6379/0?password=s3cret&db=1") == \
        "redis://host:6379/0?password=***&db=1"
    assert masked_url("unix:///run/redis.sock?password=s3cret") == \
        "unix:///run/redis.sock?password=***"


def test_a_turns_lines_carry_its_ids_as_text_and_as_json() -> None:
    record = logging.LogRecord("gateway.worker.runner", logging.ERROR, __file__, 1,
                               "agent failed: token=abc123", None, None)
    handler = logging.Handler()
    handler.addFilter(TurnFields())
    handler.addFilter(RedactSecrets())
    with turn_context("oc_1", "om_2", "turn:oc_1:om_2:7", 7):
        assert handler.filter(record)
    text = KeyValueFormatter().format(record)
    assert text.endswith("agent failed: token=*** [chat=oc_1 message=om_2 turn=turn:oc_1:om_2:7 "
                         "fence=7]")
    line = json.loads(JsonFormatter().format(record))
    assert (line["level"], line["logger"], line["msg"]) == ("ERROR", "gateway.worker.runner",
                                                            "agent failed: token=***")
    assert (line["chat_id"], line["message_id"], line["turn_id"], line["fence"]) == (
        "oc_1", "om_2", "turn:oc_1:om_2:7", "7")
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "idle", None, None)
    assert handler.filter(outside) and "chat_id" not in json.loads(
        JsonFormatter().format(outside))


@pytest.fixture(scope="module")
def json_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    rig = Rig(tmp_path_factory, GATEWAY_LOG_FORMAT="json", GATEWAY_LOG_LEVEL="DEBUG").up()
    try:
        yield rig
    finally:
        rig.close()


def json_lines(log: str) -> list[dict[str, Any]]:
    """Every logged line (Celery's banner is printed, not logged, so it is left out)."""
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def test_processes_log_json_lines_with_the_turns_ids_and_no_message_bodies(
        json_rig: Rig) -> None:
    sim, chat = json_rig.sim, "oc_json_logs"
    body = "private " + "x" * 300
    answered = sim.send_text(chat, body)
    failed = sim.send_text(chat, "boom now")
    reply_of(sim, chat, answered)
    reply_of(sim, chat, failed)
    worker = wait_until(lambda: next((line for line in json_lines(json_rig.fleet.logs("worker"))
                                      if line["msg"].startswith("agent failed on message")),
                                     None), 10, "the failure's line")
    assert isinstance(worker, dict)
    assert (worker["chat_id"], worker["message_id"], worker["level"]) == (chat, failed, "ERROR")
    assert worker["turn_id"].startswith(f"turn:{chat}:{failed}:") and worker["fence"]
    assert "RuntimeError: scripted failure" in worker["exc"]
    listener = json_lines(json_rig.fleet.logs("listener"))
    assert any(line.get("message_id") == answered and line.get("chat_id") == chat
               for line in listener), "the listener's lines about the message carry its ids"
    for log in (json_rig.fleet.logs("worker"), json_rig.fleet.logs("listener")):
        assert "x" * 60 not in log, "a message body beyond a short prefix"


SECRETS = ("SECRETKEY", "SECRETTICKET", "SECRETAPP", "SECRET TOK", "SECRETREPR", "SECRETESC",
           "SECRETENDPOINT", "SECRETBEARER")


def fail_with_secrets() -> None:
    """An exception whose text carries secrets in a URL, a JSON body, a dict's repr and an
    HTTP header."""
    try:
        raise ConnectionError("GET wss://host/ws/v2?device_id=1&access_key=SECRETKEY"
                              '&ticket=SECRETTICKET: 403 for {"AppSecret": "SECRETENDPOINT"}'
                              " with Authorization: Bearer SECRETBEARER")
    except ConnectionError as error:
        raise RuntimeError('token call answered {"app_secret": "SECRETAPP", "token": '
                           '"SECRET TOK"} for {\'app_secret\': \'SECRETREPR\'} and '
                           '"{\\"tenant_access_token\\": \\"SECRETESC\\"}"') from error


def assert_redacted(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} leaked: {text}"
    for masked in ("access_key=***", "ticket=***", '"app_secret": "***"', '"token": "***"',
                   "'app_secret': '***'", '\\"tenant_access_token\\": \\"***\\"',
                   '"AppSecret": "***"', "Authorization: Bearer ***"):
        assert masked in text, f"{masked!r} missing: {text}"
    assert "device_id=1" in text and "RuntimeError: token call answered" in text


def exception_record() -> logging.LogRecord:
    try:
        fail_with_secrets()
    except RuntimeError:
        return logging.getLogger("gateway.test").makeRecord(
            "gateway.test", logging.ERROR, __file__, 1, "connect failed", (), sys.exc_info())
    raise AssertionError("fail_with_secrets did not raise")


def test_the_formatters_mask_secrets_in_exception_text_without_the_filter() -> None:
    assert_redacted(KeyValueFormatter().format(exception_record()))
    line = json.loads(JsonFormatter().format(exception_record()))
    assert line["msg"] == "connect failed"
    assert_redacted(line["exc"])


def logger_writing_to(stream: io.StringIO) -> logging.Logger:
    logger = logging.getLogger(f"test.redact.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.addHandler(logging.StreamHandler(stream))
    return logger


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_exception_text_is_masked_on_the_gateways_handlers(log_format: str) -> None:
    stream = io.StringIO()
    logger = logger_writing_to(stream)
    dress_handlers(logger, log_format)
    try:
        fail_with_secrets()
    except RuntimeError:
        logger.exception("connect failed")
    out = stream.getvalue()
    assert_redacted(json.loads(out)["exc"] if log_format == "json" else out)


def test_exception_text_is_masked_on_a_foreign_formatters_handler() -> None:
    """Celery's own handlers (plain logging.Formatter subclasses) get the filter only."""
    stream = io.StringIO()
    logger = logger_writing_to(stream)
    logger.handlers[0].setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    redact_handlers(logger)
    try:
        fail_with_secrets()
    except RuntimeError:
        logger.exception("connect failed")
    assert_redacted(stream.getvalue())


@pytest.mark.parametrize("formatter", [None, "json", "text"])
def test_stack_info_is_masked(formatter: str | None) -> None:
    stream = io.StringIO()
    logger = logger_writing_to(stream)
    if formatter is None:
        redact_handlers(logger)
    else:
        logger.handlers[0].setFormatter(formatter_for(formatter))
    logger.warning("where", stack_info=True)  # the stack quotes this line: token=STACKSECRET
    out = stream.getvalue()
    assert "STACKSECRET" not in out and "token=***" in out


PLAIN_WORKER_ARGV = ["-m", "celery", "-A", "tasks", "worker", "-c", "1", "--without-gossip",
                     "--without-mingle"]
"""`celery -A tasks worker` as production runs it: no -l/--loglevel."""


@pytest.fixture(scope="module")
def workerless_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A listener and no worker: each test starts its own, so its worker runs the turns."""
    rig = Rig(tmp_path_factory).up(worker=False)
    try:
        yield rig
    finally:
        rig.close()


@contextlib.contextmanager
def worker_of(rig: Rig, workdir: Path, name: str, *argv: str,
              **env: str) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(name, [*PLAIN_WORKER_ARGV, "-n", f"{name}@%h", *argv],
                          {**rig.env, **env}, workdir)
    try:
        yield proc
    finally:
        proc.stop()


def test_a_worker_without_a_log_level_says_it_is_ready_and_logs_a_line_per_turn(
        workerless_rig: Rig, tmp_path: Path) -> None:
    """GATEWAY_LOG_LEVEL (INFO by default) is the worker's level: Celery's own default,
    WARNING, would hide its ready line and every turn."""
    sim, chat = workerless_rig.sim, f"oc_plain_{uuid.uuid4().hex[:8]}"
    with worker_of(workerless_rig, tmp_path, "plain") as worker:
        worker.wait_for_log("plain@", timeout_s=60)  # the banner
        worker.wait_for_log("ready.", timeout_s=60)
        text = "a private question"
        message_id = sim.send_text(chat, text)
        assert reply_of(sim, chat, message_id) == f"echo: {text}"
        line = wait_until(lambda: next((line for line in worker.log().splitlines()
                                        if f"turn turn:{chat}:{message_id}:" in line), None),
                          10, "the turn's line")
    assert isinstance(line, str)
    assert re.search(rf" INFO gateway\.worker\.runner: turn turn:{chat}:{message_id}:\d+ of chat "
                     rf"{chat} replied in \d+\.\d\ds \(attempt 1\)$", line), line


def test_an_operators_log_level_wins_over_gateway_log_level(workerless_rig: Rig,
                                                            tmp_path: Path) -> None:
    with worker_of(workerless_rig, tmp_path, "chosen", "-l", "INFO",
                   GATEWAY_LOG_LEVEL="ERROR") as worker:
        worker.wait_for_log("ready.", timeout_s=60)
