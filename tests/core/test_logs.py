"""Logs: no secrets (connection URLs, Redis passwords, in messages, exception text and stack
info), the turn's ids on its lines as text and as JSON. (Real processes' logs:
e2e/test_logs.py.)"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import uuid

import pytest

from gateway.core.logs import (
    SHOWN_MAX_CHARS,
    JsonFormatter,
    KeyValueFormatter,
    RedactSecrets,
    TurnFields,
    dress_handlers,
    formatter_for,
    masked_url,
    redact_handlers,
    shown,
    turn_context,
)


def test_long_connection_url_secrets_are_masked() -> None:
    record = logging.LogRecord("Lark", logging.INFO, __file__, 1, "connected to %s", (
        "wss://msg-frontier.feishu.cn/ws/v2?device_id=1&access_key=abc123&service_id=2"
        "&ticket=t-xyz",), None)
    assert RedactSecrets().filter(record)
    line = record.getMessage()
    assert "abc123" not in line and "t-xyz" not in line
    assert "access_key=***" in line and "ticket=***" in line and "device_id=1" in line



SDK_AFTER_SETUP = """
from gateway.core.logs import quiet_lark_handler, setup_logging
setup_logging("INFO", "text")
import gateway.feishu.ws.frames  # loads the SDK, which adds its own stdout handler
quiet_lark_handler()  # as the listener does at its start
import logging
logging.getLogger("Lark").warning("connected to wss://x/ws/v2?access_key=abc123")
"""


def test_the_sdks_lines_go_through_our_handler_once_redacted_when_it_loads_late() -> None:
    done = subprocess.run([sys.executable, "-c", SDK_AFTER_SETUP], capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout == ""  # the SDK's own "[Lark] …" handler printed nothing
    lines = [line for line in done.stderr.splitlines() if "connected to" in line]
    assert len(lines) == 1 and "access_key=***" in lines[0] and "abc123" not in lines[0]

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


@pytest.mark.parametrize(("value", "line"), [
    ("oc_plain", "oc_plain"),
    ("bot\nINFO forged line", "bot\\nINFO forged line"),
    ("x\udfffy", "x\\udfffy"),  # a lone surrogate, which no UTF-8 log file can hold
    ("\u202eevil", "\\u202eevil"),  # a bidi override
    ("é漢字🙂 ", "é漢字🙂 "),
    ("ou_a\\nINFO forged", "ou_a\\\\nINFO forged"),  # a backslash, not a line break
    (None, "None"),
])
def test_a_value_from_an_event_is_shown_on_one_printable_line(value: object,
                                                               line: str) -> None:
    assert shown(value) == line
    shown(value).encode("utf-8")


def test_a_long_value_is_cut() -> None:
    assert shown("x" * 500) == "x" * SHOWN_MAX_CHARS + "…"
    assert shown("\n" * 60, max_chars=10) == "\\n" * 5 + "…"


def test_redis_password_is_masked() -> None:
    assert masked_url("redis://user:pw@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_a_password_in_a_urls_query_is_masked_too() -> None:
    assert masked_url("redis://host:6379/0?password=s3cret&db=1") == \
        "redis://host:6379/0?password=***&db=1"
    assert masked_url("unix:///run/redis.sock?password=s3cret") == \
        "unix:///run/redis.sock?password=***"


def test_a_turns_lines_carry_its_ids_as_text_and_as_json() -> None:
    record = logging.LogRecord("gateway.worker.turn_runner", logging.ERROR, __file__, 1,
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
    assert (line["level"], line["logger"], line["msg"]) == ("ERROR", "gateway.worker.turn_runner",
                                                            "agent failed: token=***")
    assert (line["chat_id"], line["message_id"], line["turn_id"], line["fence"]) == (
        "oc_1", "om_2", "turn:oc_1:om_2:7", "7")
    outside = logging.LogRecord("x", logging.INFO, __file__, 1, "idle", None, None)
    assert handler.filter(outside) and "chat_id" not in json.loads(
        JsonFormatter().format(outside))


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


"""`celery -A tasks worker` as production runs it: no -l/--loglevel."""
