"""Webhook mode (`feishu-gateway serve`) against the real server: Feishu's URL verification,
every refusal (401 with one log line, 413), a push that meets a Redis failure answered 500
and taken on Feishu's retry, `status` and `health`, and two replicas behind a load balancer
with one SIGKILLed while events flow: nothing lost, nothing twice. (The pipeline, /stop and
approvals in webhook mode: the `front`/`mode` parameters of test_pipeline.py, test_cancel.py
and test_approvals.py.)"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.ops.processes import wait_until
from gateway.simulator.webhook import signed_request, with_token
from tests.support.cli import operator
from tests.support.replies import replies_to
from tests.support.rig import TEST_WEBHOOK, Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, mode="webhook", FEISHU_WEBHOOK_MAX_BODY_BYTES="8192",
                GATEWAY_REDIS_TIMEOUT_S="0.5") as rig:
        yield rig


def url_of(rig: Rig) -> str:
    return next(iter(rig.webhook_urls.values()))


def message_event(chat: str, message_id: str) -> bytes:
    content = json.dumps({"text": "hi"})
    return json.dumps({
        "schema": "2.0",
        "header": {"event_id": f"ev_{message_id}", "event_type": "im.message.receive_v1",
                   "app_id": "cli_sim_app", "create_time": "1"},
        "event": {"sender": {"sender_id": {"open_id": "ou_user_1"}, "sender_type": "user"},
                  "message": {"message_id": message_id, "chat_id": chat, "chat_type": "p2p",
                              "message_type": "text", "content": content,
                              "create_time": "1"}}}).encode()


def test_url_verification_is_answered(rig: Rig) -> None:
    assert rig.sim.verify_url(url_of(rig))


@pytest.mark.parametrize("case", ["token", "signature", "other-key", "undecryptable", "old",
                                  "plain"])
def test_a_refused_push_is_401_with_one_log_line_and_nothing_taken(rig: Rig, case: str) -> None:
    chat, message_id = f"oc_refused_{case}", f"om_refused_{case}"
    token = "wrong" if case == "token" else TEST_WEBHOOK.verification_token
    key = "another key" if case in ("other-key", "undecryptable") else TEST_WEBHOOK.encrypt_key
    config = TEST_WEBHOOK.__class__(token, "" if case == "plain" else key)
    body, headers = signed_request(with_token(message_event(chat, message_id), token), config,
                                   at_s=1_000_000 if case == "old" else None)
    if case == "signature":
        headers["X-Lark-Signature"] = "0" * 64
    if case == "undecryptable":  # unsigned (as a URL verification comes): the key is tried
        for name in ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature"):
            del headers[name]
    why = {"token": "wrong verification token", "signature": "wrong X-Lark-Signature",
           "other-key": "wrong X-Lark-Signature", "undecryptable": "cannot decrypt",
           "old": "FEISHU_WEBHOOK_MAX_AGE_S", "plain": "a plain body"}[case]
    seen = rig.fleet.logs("listener").count(why)
    answer = httpx.post(url_of(rig), content=body, headers=headers, timeout=10)
    assert answer.status_code == 401
    wait_until(lambda: rig.fleet.logs("listener").count(why) > seen, 5, "the refusal's log line")
    logs = rig.fleet.logs("listener")
    assert "Traceback" not in logs and TEST_WEBHOOK.encrypt_key not in logs
    assert not rig.client().exists(f"gw:{{{chat}}}:inbox")


def test_a_body_over_the_cap_is_413(rig: Rig) -> None:
    answer = httpx.post(url_of(rig), content=b"{" + b" " * 9000 + b"}", timeout=10,
                        headers={"Content-Type": "application/json"})
    assert answer.status_code == 413


def test_a_push_meeting_a_redis_failure_is_answered_500_and_taken_later_once(
        rig: Rig) -> None:
    chat = "oc_webhook_redis_pause"
    client = rig.client()
    client.client_pause(1500, all=False)  # writes wait 1.5 s: the Redis step times out
    message_id = rig.sim.send_text(chat, "through a pause")
    assert [a.code for a in rig.sim.acks_of(message_id)][:1] == [500]
    wait_until(lambda: message_id in replies_to(rig.sim, chat), 30, "the retried push's reply")
    assert replies_to(rig.sim, chat)[message_id] == ["echo: through a pause"]
    wait_until(lambda: [a.code for a in rig.sim.acks_of(message_id)][-1] == 200, 20,
               "Feishu's next push of it, found taken: a duplicate")
    assert replies_to(rig.sim, chat)[message_id] == ["echo: through a pause"], "once"
    assert "answered 500, taken later" in rig.fleet.logs("listener")


def test_status_and_health_show_the_webhook_listener(rig: Rig, tmp_path: Path) -> None:
    connections = json.loads(operator(rig.env, tmp_path, "status", "--json"))["connections"]
    assert [c["state"] for c in connections.values()] == ["serving"]
    assert "1 connection(s) up" in operator(rig.env, tmp_path, "health", "listener")


def test_two_replicas_one_killed_while_events_flow_lose_nothing_and_answer_once(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    with rig_up(tmp_path_factory, mode="webhook", start="nothing", kill=True,
                GATEWAY_LOG_LEVEL="DEBUG") as rig:
        rig.up(workers=1, concurrency=4)
        doomed = next(iter(rig.webhook_urls))
        rig.listener()
        sent: list[tuple[str, str]] = []

        def users() -> None:
            for n in range(40):
                chat = f"oc_replicas_{n % 4}"
                sent.append((chat, rig.sim.send_text(chat, f"message {n}")))

        flow = threading.Thread(target=users)
        flow.start()
        wait_until(lambda: len(sent) >= 12, 30, "events flowing")
        doomed.kill()
        flow.join(60)
        for chat in {c for c, _ in sent}:
            mine = [m for c, m in sent if c == chat]

            def all_answered(chat: str = chat, mine: list[str] = mine) -> bool:
                return set(mine) <= set(replies_to(rig.sim, chat))

            wait_until(all_answered, 60, f"every reply in {chat}")
            answered = Counter(m.reply_to for m in rig.sim.sent_messages(chat))
            assert all(answered[m] == 1 for m in mine), "a message answered twice"
        survivor = [p for p in rig.webhook_urls if p is not doomed][0]
        taken = "of chat oc_replicas_"
        assert taken in survivor.log() and taken in doomed.log(), "both replicas took events"
