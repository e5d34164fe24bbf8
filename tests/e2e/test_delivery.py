"""Replies under a misbehaving open API: 5xx with JSON or
HTML bodies, rate limits, resets after the message was created, a failing token endpoint,
rejections; each classified at one boundary, retried with the same uuid within the budget,
in the chat's order, and reported to the operator when finally given up."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from gateway.feishu.outbound.delivery import derived_uuid, reply_uuid
from gateway.ops.processes import wait_until
from gateway.simulator import SendFaults, SentMessage
from gateway.worker.sending import gave_up_reply
from tests.support.replies import CONFIRMED, agent_events, command_answer, replies_to, reply_of
from tests.support.rig import TEST_LEASE_TTL_S, Rig, rig_up

BUDGET_S = 6.0
QUOTA_PER_S = 9
"""The gateway's send quota here: Feishu's (the simulator's, when a test sets it) is 10."""
FETCH_MAX_BYTES = 1000


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, GATEWAY_REPLY_RETRY_BUDGET_S=str(BUDGET_S),
                FEISHU_SEND_RATE_PER_S=str(QUOTA_PER_S), FEISHU_CHAT_SEND_RATE_PER_S="5",
                FEISHU_FETCH_MAX_BYTES=str(FETCH_MAX_BYTES)) as rig:
        yield rig


@pytest.fixture(autouse=True)
def no_faults_left(rig: Rig) -> Iterator[None]:
    yield
    rig.sim.set_send_faults(None)


def status(rig: Rig, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "status", *args],
                            env={**rig.env, "PATH": "/usr/bin:/bin"}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_kind_of_transient_failure_is_retried_with_the_same_uuid(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.script_send_faults(["5xx-html", "5xx-json", "429", "400-ratelimit", "reset"])
    first = sim.send_text(chat_id, "through the storm")
    second = sim.send_text(chat_id, "right behind")
    wait_until(lambda: second in replies_to(sim, chat_id), 30, "both replies")
    replies = replies_to(sim, chat_id)
    assert replies[first] == ["echo: through the storm"], "one message, though reset once"
    assert replies[second] == ["echo: right behind"]
    assert sim.send_attempts(reply_uuid(first)) == 6, "5 failures, then the success"
    [one, two] = [m for m in sim.sent_messages(chat_id)]
    assert (one.reply_to, two.reply_to) == (first, second), "the next turn waited its turn"
    log = rig.fleet.logs("worker")
    assert "Traceback" not in log and "JSONDecodeError" not in log


def test_the_rate_limit_reset_is_honoured(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.set_send_faults(SendFaults(rate_limit_429=1.0, rate_limit_reset_s=2))
    clock = time.monotonic()
    message_id = sim.send_text(chat_id, "slow down")
    wait_until(lambda: sim.send_attempts(reply_uuid(message_id)) >= 1, 20, "a first attempt")
    sim.set_send_faults(None)
    wait_until(lambda: message_id in replies_to(sim, chat_id), 20, "the reply")
    assert time.monotonic() - clock >= 2.0, "the retry waited for x-ogw-ratelimit-reset"
    assert sim.send_attempts(reply_uuid(message_id)) == 2


def test_a_refusing_token_endpoint_is_retried_and_the_reply_arrives(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.expire_tokens()  # the next send gets 99991663 and fetches a token again
    sim.script_token_faults(["5xx-html", "5xx-json", "429"])
    message_id = sim.send_text(chat_id, "token trouble")
    wait_until(lambda: message_id in replies_to(sim, chat_id), 30, "the reply")
    assert replies_to(sim, chat_id)[message_id] == ["echo: token trouble"]
    assert sim.fault_counts.get("token:5xx-html") == 1


def test_a_withdrawn_message_is_answered_in_its_chat(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    gone = sim.send_text(chat_id, "sleep 1")
    after = sim.send_text(chat_id, "after the withdrawn one")
    sim.withdraw(gone)  # recalled while its turn runs: the reply gets 230011
    wait_until(lambda: after in replies_to(sim, chat_id), 20, "the next reply")
    assert gone not in replies_to(sim, chat_id)
    assert sim.send_attempts(reply_uuid(gone)) == 1, "a rejection is never retried"
    [fallback] = [m for m in sim.sent_messages(chat_id) if m.reply_to is None]
    assert fallback.text == "echo: sleep 1"
    assert fallback.uuid == derived_uuid(reply_uuid(gone), "new"), "stable on a re-run"
    assert f"message {gone} is gone" in rig.fleet.logs("worker")


def test_a_reply_still_failing_after_the_budget_is_given_up_in_order(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.set_send_faults(SendFaults(http_5xx_html=1.0))
    doomed = sim.send_text(chat_id, "never delivered")
    behind = sim.send_text(chat_id, "waits for it")
    clock = time.monotonic()
    wait_until(lambda: f"reply to {doomed} in chat {chat_id} given up" in
               rig.fleet.logs("worker"), BUDGET_S + 30, "the give-up")
    assert time.monotonic() - clock >= BUDGET_S - 1, "retried for the whole budget"
    assert behind not in replies_to(sim, chat_id), "the next turn did not overtake it"
    sim.set_send_faults(None)
    wait_until(lambda: behind in replies_to(sim, chat_id), 20, "the next reply")
    assert f"{doomed} in chat {chat_id} (reply): reply to {doomed}: HTTP 50" in status(rig)


def test_the_give_up_path_hands_over_even_when_its_own_reply_fails(
        rig: Rig, chat_id: str) -> None:
    """A message whose worker dies every time is given up; when that notice cannot
    be sent either, the chat still goes on."""
    sim, client = rig.sim, rig.client()
    poison = sim.send_text(chat_id, "crash")
    after = sim.send_text(chat_id, "alive after all")
    wait_until(lambda: len(agent_events(client, chat_id)) >= 3, 3 * (TEST_LEASE_TTL_S + 8),
               "the third crash")
    sim.set_send_faults(SendFaults(http_5xx_html=1.0))  # the give-up notice will fail
    worker_log = rig.fleet.logs
    wait_until(lambda: "gave-up reply" in worker_log("worker") or
               f"reply to {poison} in chat {chat_id} given up" in worker_log("worker"),
               TEST_LEASE_TTL_S + 8 + BUDGET_S + 10, "the give-up notice to be given up")
    sim.set_send_faults(None)
    wait_until(lambda: after in replies_to(sim, chat_id), 30, "the next reply")
    assert poison not in replies_to(sim, chat_id)
    assert replies_to(sim, chat_id)[after] == ["echo: alive after all"]
    assert f"message {poison} of chat {chat_id} given up after 3 attempts" in worker_log("worker")
    assert sim.send_attempts(reply_uuid(poison, "gave-up")) >= 2
    assert gave_up_reply(3) not in [m.text for m in sim.sent_messages(chat_id)]


# Outbound forms

def test_markdown_goes_as_a_post_and_code_or_tables_as_a_card(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    plain = sim.send_text(chat_id, "just words")
    rich = sim.send_text(chat_id, "**bold** and\n- a list")
    code = sim.send_text(chat_id, "see:\n```python\nprint(1)\n```")
    wait_until(lambda: code in replies_to(sim, chat_id), 20, "three replies")
    sent = {m.reply_to: m for m in sim.sent_messages(chat_id)}
    assert (sent[plain].msg_type, sent[plain].text) == ("text", "echo: just words")
    assert sent[rich].msg_type == "post"
    assert sent[rich].content == {"zh_cn": {"content": [[
        {"tag": "md", "text": "echo: **bold** and\n- a list"}]]}}
    assert sent[code].msg_type == "interactive"
    assert sent[code].content["body"]["elements"][0]["content"] == \
        "echo: see:\n```python\nprint(1)\n```"


def test_a_long_table_is_split_into_labelled_cards_each_with_its_header(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "table 400")  # about 7,000 characters: two cards
    wait_until(lambda: len(replies_to(sim, chat_id).get(asked, [])) >= 2, 20, "the cards")
    cards = [m for m in sim.sent_messages(chat_id) if m.reply_to == asked]
    assert [m.msg_type for m in cards] == ["interactive"] * len(cards) and len(cards) == 2
    texts = [m.content["body"]["elements"][0]["content"] for m in cards]
    assert texts[0].endswith("(1/2)") and texts[1].endswith("(2/2)")
    assert texts[1].startswith("| n | n² |\n| --- | ---: |\n| row ")
    rows = [line for text in texts for line in text.splitlines() if line.startswith("| row")]
    assert rows == [f"| row {n} | {n * n} |" for n in range(400)], "every row once, in order"
    assert len({m.uuid for m in cards}) == 2


def test_a_message_in_a_thread_is_answered_in_the_thread(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "in the topic", thread_id="omt_topic_1",
                          root_id="om_topic_root")
    wait_until(lambda: asked in replies_to(sim, chat_id), 20, "the reply")
    [reply] = [m for m in sim.sent_messages(chat_id) if m.reply_to == asked]
    assert reply.in_thread and reply.thread_id == "omt_topic_1"


# Streaming replies: the scripted agent's `stream N D [K]`

def words(count: int) -> str:
    return "".join(f"w{n} " for n in range(count))


def the_card(rig: Rig, chat_id: str, asked: str) -> SentMessage:
    wait_until(lambda: asked in replies_to(rig.sim, chat_id), 20, "the streaming card")
    [card] = [m for m in rig.sim.sent_messages(chat_id) if m.reply_to == asked]
    assert card.msg_type == "interactive" and card.card_id, card
    return card


def test_a_streamed_answer_grows_in_one_card_within_the_throttle(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    clock = time.monotonic()
    asked = sim.send_text(chat_id, "stream 20 0.1")  # 20 pieces over 2 s
    card = the_card(rig, chat_id, asked)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    took_s = time.monotonic() - clock
    assert view.elements["answer"] == words(20)
    grown = [text for text in view.history if text]
    assert len(grown) >= 3, "the text was shown as it grew"
    assert all(a.split() == b.split()[:len(a.split())]
               for a, b in zip(grown, grown[1:], strict=False))
    assert view.updates <= took_s / 0.3 + 2, "at most one update per interval, and the close"
    assert [m.reply_to for m in sim.sent_messages(chat_id)] == [asked], "one card, no text"


def test_a_streamed_answer_past_one_cards_limit_goes_on_in_the_next_message(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "stream 1000 0")  # 5,890 characters: past one chunk
    card = the_card(rig, chat_id, asked)
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert len(view.elements["answer"]) <= 4000, "the card holds one chunk"
    rest = wait_until(lambda: [m.text for m in sim.sent_messages(chat_id)
                               if m.reply_to == asked and m.message_id != card.message_id],
                      20, "the rest of the answer")
    assert isinstance(rest, list)
    said = (view.elements["answer"] + " " + " ".join(rest)).split()
    assert [w for w in said if not re.fullmatch(r"\(\d/2\)", w)] == words(1000).split(), \
        "every word once, in order, across the card and the next message (labelled 1/2, 2/2)"
    assert view.rejected == 0


def test_stop_mid_stream_closes_the_card_with_a_mark(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "stream 200 0.05")
    card = the_card(rig, chat_id, asked)
    wait_until(lambda: len((sim.card_of(card.message_id) or card).text) > 10, 10, "some text")
    stop = sim.send_text(chat_id, "/stop")
    view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
    assert "Stopped." in view.text
    assert view.elements["answer"].startswith("w0 w1") and "w199" not in view.text
    assert command_answer(sim, chat_id, stop) == CONFIRMED, "said once: on the card"
    assert [m.message_id for m in sim.sent_messages(chat_id) if m.reply_to == asked] == \
        [card.message_id], "no second card, no text reply"


def test_a_rerun_after_a_crash_mid_stream_shows_one_card(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    asked = sim.send_text(chat_id, "stream 12 0.1 6")  # the first run dies after 6 pieces
    card = the_card(rig, chat_id, asked)
    view = sim.wait_for_card(card.message_id, streaming=False,
                             timeout_s=TEST_LEASE_TTL_S * 4 + 20)
    assert view.elements["answer"] == words(12)
    assert [m.message_id for m in sim.sent_messages(chat_id) if m.reply_to == asked] == \
        [card.message_id], "the re-run streamed into the same card"
    assert view.rejected == 0, "the re-run numbered its updates above the first run's"


def test_a_refused_rich_form_is_sent_again_as_plain_text(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.reject_msg_types({"post", "interactive"})
    try:
        asked = sim.send_text(chat_id, "**bold** claim")
        wait_until(lambda: asked in replies_to(sim, chat_id), 20, "the reply")
    finally:
        sim.reject_msg_types(None)
    [reply] = [m for m in sim.sent_messages(chat_id) if m.reply_to == asked]
    assert (reply.msg_type, reply.text) == ("text", "echo: **bold** claim")
    assert reply.uuid == derived_uuid(reply_uuid(asked), "text")
    assert sim.send_attempts(reply_uuid(asked)) == 1, "the refused post was not retried"
    assert f"feishu refused the post form of the reply to {asked}" in rig.fleet.logs("worker")


def test_a_rejected_reply_is_not_retried_and_the_operator_sees_it(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    sim.reject_msg_types({"text"})
    try:
        refused = sim.send_text(chat_id, "nobody may hear this")
        wait_until(lambda: f"reply to {refused} in chat {chat_id} given up" in
                   rig.fleet.logs("worker"), 20, "the give-up")
    finally:
        sim.reject_msg_types(None)
    assert sim.send_attempts(reply_uuid(refused)) == 1, "a rejection is never retried"
    assert f"given up: reply to {refused}: HTTP 400, code 230001" in rig.fleet.logs("worker")
    assert f"{refused} in chat {chat_id} (reply)" in status(rig)
    after = sim.send_text(chat_id, "the chat goes on")
    wait_until(lambda: after in replies_to(sim, chat_id), 20, "the next reply")


# Inbound additions: quoted parents, forwarded messages, attachments

def test_a_reply_to_a_message_sees_it_quoted(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    parent = sim.send_text(chat_id, "the plan is ```ship it``` friday")
    wait_until(lambda: parent in replies_to(sim, chat_id), 20, "the first reply")
    asked = sim.send_text(chat_id, "quoted", parent_id=parent)
    wait_until(lambda: asked in replies_to(sim, chat_id), 20, "the reply")
    assert replies_to(sim, chat_id)[asked] == ["quote: the plan is ```ship it``` friday"]


def test_forwarded_messages_are_listed_for_the_agent(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    forwarded = sim.send_merge_forward(chat_id, [
        ("text", {"text": "first point"}, "ou_ann"),
        ("merge_forward", [("text", {"text": "nested"}, "ou_bob")], "ou_cat"),
        ("image", {"image_key": "img_v2_x"}, "ou_ann")])
    wait_until(lambda: forwarded in replies_to(sim, chat_id), 20, "the reply")
    assert replies_to(sim, chat_id)[forwarded] == [
        "echo: [forwarded messages]\n- ou_ann: first point\n- ou_cat: [forwarded messages]"
        "\n  - ou_bob: nested\n- ou_ann: [image]"]


def test_an_agent_fetches_an_attachment_within_the_size_cap(rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    small, _ = sim.send_attachment(chat_id, b"hello attachment", name="note.txt")
    big, _ = sim.send_attachment(chat_id, b"x" * (FETCH_MAX_BYTES + 1), name="big.bin")
    wait_until(lambda: big in replies_to(sim, chat_id), 20, "both replies")
    assert replies_to(sim, chat_id)[small] == ["fetched 16 bytes: hello attachment"]
    assert replies_to(sim, chat_id)[big] == ["not fetched: TooLarge"]


def test_a_posts_inline_images_reach_the_agent_as_data(rig: Rig, chat_id: str) -> None:
    """Images inside a rich-text post are attachments like an image message's: the agent
    fetches each from the list, and its text names them without keys."""
    sim = rig.sim
    post = sim.send_post(chat_id, [
        [{"tag": "text", "text": "fetchall "}, {"tag": "img", "image_key": "img_v3_one"}],
        [{"tag": "img", "image_key": "img_v3_two"}]],
        images={"img_v3_one": b"PNG-one-bytes", "img_v3_two": b"PNG-two!"})
    assert reply_of(sim, chat_id, post, 30) == (
        "fetched image 13 bytes: PNG-one-, image 8 bytes: PNG-two!")


# The shared send quota. Last in the module: it adds a worker process.


def test_a_burst_over_many_chats_stays_within_feishus_quota_across_two_workers(
        rig: Rig) -> None:
    """Two messages in each of 12 chats, answered by two workers' pools under Feishu's
    quota (the simulator enforcing it) with three 429s on top: every answer comes once and
    in order, no second holds more sends than the quota, Feishu never rate-limits a send
    the quota let through, and no typing reaction is left behind."""
    sim = rig.sim
    rig.fleet("worker")  # a second worker process draws from the same quota
    sim.set_rate_limit(QUOTA_PER_S + 1)  # Feishu's quota, as the simulator enforces it
    sim.script_send_faults(["429", "429", "429"])  # and a few refusals on top
    since, limited = time.time(), sim.rate_limited_count()
    injected = sim.fault_counts.get("429", 0)
    chats = [f"oc_storm_{n}_{int(since)}" for n in range(12)]
    asked = {chat: [sim.send_text(chat, f"burst {chat[-4:]} {k}") for k in range(2)]
             for chat in chats}

    def unanswered() -> list[str]:
        return [f"{chat}/{m}" for chat, ms in asked.items() for m in ms
                if m not in replies_to(sim, chat)]

    try:
        with contextlib.suppress(TimeoutError):  # (the assertion names what is missing)
            wait_until(lambda: not unanswered(), 90, "every answer")
    finally:
        sim.set_rate_limit(None)
    assert not unanswered(), f"answered within 90 s; not: {unanswered()}"
    for chat, (first, second) in asked.items():
        replies = replies_to(sim, chat)
        assert replies == {first: [f"echo: burst {chat[-4:]} 0"],
                           second: [f"echo: burst {chat[-4:]} 1"]}, "each once, in order"
    times = [t for t in sim.send_times() if t >= since]
    busiest = max(sum(1 for u in times if t <= u < t + 1.0) for t in times)
    assert busiest <= QUOTA_PER_S + 1, f"{busiest} sends within one second"
    assert sim.rate_limited_count() == limited, "the quota kept every worker under Feishu's"
    assert sim.fault_counts.get("429", 0) - injected == 3
    pids = {e["pid"] for chat in chats for e in agent_events(rig.client(), chat)}
    assert len(pids) >= 3, "turns ran in both workers' pool processes"
    wait_until(lambda: not any(sim.reactions(m) for ms in asked.values() for m in ms), 30,
               "no typing reaction left on an answered message")
