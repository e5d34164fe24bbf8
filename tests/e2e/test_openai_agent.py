"""The built-in `openai` agent against a small OpenAI-compatible server the tests start
(tests/support/fake_llm.py: the real wire protocol, streamed), through a real listener and
real workers: history across worker processes, /new, a stop mid-stream (its card closed
with a mark), an endpoint error."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import pytest

from gateway.agents.chat_completions import EndpointError, sse_pieces
from gateway.core.media import Image
from gateway.feishu.outbound.stream_card import STOPPED_MARK
from gateway.ops.processes import wait_until
from gateway.simulator import SentMessage, Simulator
from gateway.simulator.payloads import flatten_text
from gateway.worker.sending import FAILURE_REPLY
from gateway.worker.surfaces import EDITS_WHILE_STREAMING
from tests.support.agents import TINY_PNG
from tests.support.fake_llm import API_KEY, FakeLlm
from tests.support.replies import CONFIRMED, command_answer
from tests.support.replies import reply_of as cancel_reply_of
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, Rig, rig_up


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLlm]:
    server = FakeLlm().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, llm: FakeLlm) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="listener",  # each test starts the workers it needs
                kill=True, GATEWAY_AGENT="openai", OPENAI_BASE_URL=llm.url,
                OPENAI_API_KEY=API_KEY, GATEWAY_MODEL="test-model",
                GATEWAY_SYSTEM_PROMPT="Be brief.") as rig:
        yield rig


@pytest.fixture(autouse=True)
def workers_stopped(rig: Rig) -> Iterator[None]:
    """Each test starts the workers it needs; none outlives it, failed or not, so no later
    test's message goes to a worker of other settings."""
    yield
    for worker in rig.fleet.workers():
        worker.stop()


def reply_of(sim: Simulator, chat_id: str, message_id: str, timeout_s: float = 20) -> str:
    """The one reply to `message_id`, once it is final: a streaming card is read when its
    stream is over, not at a piece on the way."""
    first = wait_until(lambda: [m for m in sim.sent_messages(chat_id)
                                if m.reply_to == message_id], timeout_s,
                       f"a reply to {message_id}")
    assert isinstance(first, list) and len(first) == 1, first
    if first[0].card_id:
        return sim.wait_for_card(first[0].message_id, streaming=False, timeout_s=timeout_s).text
    return cancel_reply_of(sim, chat_id, message_id, timeout_s)


def test_a_conversation_goes_on_in_another_worker_process_and_new_starts_empty(
        rig: Rig, llm: FakeLlm) -> None:
    sim, chat = rig.sim, "oc_llm_history"
    first_worker = rig.fleet("worker", concurrency=1)
    first = sim.send_text(chat, "my name is Ada")
    assert reply_of(sim, chat, first) == "heard 1: my name is Ada"
    first_worker.stop()
    assert "agent cache: released 1 agents" in first_worker.log(), "warm shutdown releases"
    second_worker = rig.fleet("worker", concurrency=1)  # another process: no memory of its own
    second = sim.send_text(chat, "what is my name?")
    assert reply_of(sim, chat, second) == "heard 2: my name is Ada / what is my name?"
    assert llm.requests()[-1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "heard 1: my name is Ada"},
        {"role": "user", "content": "what is my name?"},
    ], "the whole history went to the endpoint, from Redis"
    sim.send_text(chat, "/new")
    fresh = sim.send_text(chat, "hello again")
    assert reply_of(sim, chat, fresh) == "heard 1: hello again", "/new starts empty"
    assert API_KEY not in rig.fleet.logs("worker") + rig.fleet.logs("listener")
    second_worker.stop()


def test_a_stop_mid_stream_closes_the_stream_and_marks_its_card_stopped(
        rig: Rig, llm: FakeLlm) -> None:
    """The answer streamed into one card; /stop closes the model's stream
    and the card with the "Stopped." mark, and nothing else is sent for that message."""
    sim, chat = rig.sim, "oc_llm_stop"
    worker = rig.fleet("worker", concurrency=1)
    slow = sim.send_text(chat, "slow story please")
    wait_until(lambda: any(r[-1]["content"] == "slow story please" for r in llm.requests()),
               20, "the streamed request")
    closed_before = llm.seen.closed_early
    stop = sim.send_text(chat, "/stop")
    stopped = command_answer(sim, chat, stop, TEST_CANCEL_TIMEOUT_S + 10)
    assert stopped == CONFIRMED or stopped.startswith("Stopped."), stopped
    wait_until(lambda: llm.seen.closed_early > closed_before, 10, "the stream to be closed")
    after = sim.send_text(chat, "are you there?")
    assert reply_of(sim, chat, after) == "heard 1: are you there?", \
        "the stopped exchange is not in the history"
    sent = [m for m in sim.sent_messages(chat) if m.reply_to == slow]
    assert len(sent) <= 1, "at most the one streaming card"
    if sent:  # the stop came after the first piece: the card shows the text so far
        [card] = sent
        assert card.msg_type == "interactive" and card.card_id, card
        view = sim.wait_for_card(card.message_id, streaming=False, timeout_s=10)
        assert STOPPED_MARK in view.text and view.elements["answer"].startswith("piece")
        assert stopped == CONFIRMED, "said once: on the card"
    worker.stop()


# Where cards are off (FEISHU_REPLY_FORMAT text or post), a stream edits one message in place.

def texts_of(message: SentMessage) -> list[str]:
    """What a message showed, edit by edit, then now (text and post forms)."""
    shown = [*message.history, message.content]
    return [flatten_text(message.msg_type if "text" in c else "post", c) for c in shown]


def test_with_cards_off_the_answer_grows_in_one_edited_message_within_feishus_edit_limit(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_llm_edited"
    worker = rig.fleet("worker", concurrency=1, FEISHU_REPLY_FORMAT="text",
                       FEISHU_STREAM_INTERVAL_MS="50")
    asked = sim.send_text(chat, "count 80")  # 80 pieces over 4 s: an edit due every piece
    answer = "".join(f"n{n} " for n in range(80)).strip()
    wait_until(lambda: any(m.text.strip() == answer for m in sim.sent_messages(chat)), 30,
               "the whole answer")
    [sent] = [m for m in sim.sent_messages(chat) if m.reply_to == asked]
    assert sent.msg_type == "text" and sent.updated
    shown = texts_of(sent)
    assert len(shown) >= 4, "the text was shown as it grew"
    assert all(b.startswith(a) for a, b in zip(shown, shown[1:], strict=False)), shown
    assert len(sent.history) <= EDITS_WHILE_STREAMING + 1, "edits stay within the budget"
    assert [m.reply_to for m in sim.sent_messages(chat)] == [asked], "one message, no other"
    worker.stop()


def test_with_posts_a_stop_mid_stream_marks_the_edited_message_stopped(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_llm_edited_stop"
    worker = rig.fleet("worker", concurrency=1, FEISHU_REPLY_FORMAT="post")
    slow = sim.send_text(chat, "slow story please")
    wait_until(lambda: any(m.reply_to == slow for m in sim.sent_messages(chat)), 20,
               "the answer's message")
    stop = sim.send_text(chat, "/stop")
    assert command_answer(sim, chat, stop, TEST_CANCEL_TIMEOUT_S + 10) == CONFIRMED, \
        "said once: on the edited message"
    [sent] = [m for m in sim.sent_messages(chat) if m.reply_to == slow]
    assert sent.msg_type == "post"
    wait_until(lambda: STOPPED_MARK in (sim.get_message(sent.message_id) or sent).text, 10,
               "the stopped mark")
    assert (sim.get_message(sent.message_id) or sent).text.startswith("piece")
    worker.stop()


def test_an_endpoint_error_is_an_honest_short_failure_reply(rig: Rig) -> None:
    """(On the threads pool: its agents live in the main process, released there too.)"""
    sim, chat = rig.sim, "oc_llm_fail"
    worker = rig.fleet("worker", concurrency=1, pool="threads")
    failed = sim.send_text(chat, "fail now")
    assert reply_of(sim, chat, failed) == FAILURE_REPLY
    assert "the model endpoint answered HTTP 500: the model is overloaded" in \
        rig.fleet.logs("worker")
    later = sim.send_text(chat, "and now?")
    assert reply_of(sim, chat, later) == "heard 1: and now?", "the chat goes on"
    worker.stop()
    assert "agent cache: released 1 agents" in worker.log(), "warm shutdown releases"


def test_stream_pieces_are_read_and_a_mid_stream_error_is_an_error() -> None:
    lines = ['data: {"choices":[{"delta":{"role":"assistant"}}]}', "",
             'data: {"choices":[{"delta":{"content":"Hel"}}]}', ": keep-alive",
             'data: {"choices":[{"delta":{"content":"lo"}}]}', "data: [DONE]",
             'data: {"choices":[{"delta":{"content":"after done"}}]}']
    assert list(sse_pieces(iter(lines))) == ["Hel", "lo"]
    failed = iter(['data: {"choices":[{"delta":{"content":"Hel"}}]}',
                   'data: {"error":{"message":"context length exceeded"}}'])
    with pytest.raises(EndpointError, match="mid-stream: context length exceeded"):
        list(sse_pieces(failed))


def test_a_picture_the_model_draws_is_sent_after_its_text(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_llm_draw"
    worker = rig.fleet("worker", concurrency=1)
    try:
        asked = sim.send_text(chat, "draw a dot")
        wait_until(lambda: len([m for m in sim.sent_messages(chat) if m.reply_to == asked]) >= 2,
                   30, "the text and the picture")
        text, picture = [m for m in sim.sent_messages(chat) if m.reply_to == asked]
        assert "Drawn: a dot." in text.text and picture.msg_type == "image"
        assert sim.resource_of(picture.message_id) == TINY_PNG
    finally:
        worker.stop()


def test_images_among_the_stream_pieces_are_read_from_data_urls_only() -> None:
    url = "data:image/png;base64," + base64.b64encode(TINY_PNG).decode()
    lines = ['data: {"choices":[{"delta":{"content":"see "}}]}',
             'data: ' + json.dumps({"choices": [{"delta": {"images": [
                 {"type": "image_url", "image_url": {"url": url}}]}}]}),
             'data: ' + json.dumps({"choices": [{"delta": {"content": [
                 {"type": "text", "text": "and "},
                 {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                 {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}}]})]
    pieces = list(sse_pieces(iter(lines)))
    assert pieces[0] == "see " and pieces[2] == "and " and len(pieces) == 3
    assert isinstance(pieces[1], Image) and pieces[1].data == TINY_PNG
