"""Each agent in docs/examples/ answers through a real gateway: a worker of its own on one
rig (Redis, simulator, listener)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.ops.processes import REPO, GatewayProcess, wait_until
from gateway.simulator import SentMessage
from tests.support.replies import button
from tests.support.rig import Rig, rig_up

EXAMPLES = REPO / "docs" / "examples"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(EXAMPLES))  # as docs/agents.md says to run them
        with rig_up(tmp_path_factory, start="nothing", pool="threads") as rig:
            rig.listener(wait=False)  # it gets ready while the first example's worker starts
            yield rig


def example_worker(rig: Rig, factory: str) -> GatewayProcess:
    """A worker whose agent is `factory`; killed by the test once its answer is in (the
    next example's worker must be the only one taking turns)."""
    worker = rig.fleet("worker", concurrency=1, GATEWAY_AGENT=factory)
    rig.sim.wait_connected(1, timeout_s=30)
    return worker


def reply_to(rig: Rig, chat_id: str, message_id: str, kind: str) -> SentMessage:
    found = wait_until(lambda: next((m for m in rig.sim.sent_messages(chat_id)
                                     if m.reply_to == message_id and m.msg_type == kind),
                                    None), 30, f"the {kind} reply")
    assert isinstance(found, SentMessage)
    return found


def test_the_streaming_example_answers_in_one_growing_card(rig: Rig, chat_id: str) -> None:
    worker = example_worker(rig, "shouter:factory")
    try:
        asked = rig.sim.send_text(chat_id, "make some noise")
        card = reply_to(rig, chat_id, asked, "interactive")
        view = rig.sim.wait_for_card(card.message_id, streaming=False, timeout_s=20)
        assert view.elements["answer"] == "MAKE SOME NOISE "
    finally:
        worker.kill()


def test_the_approval_example_asks_then_acts_on_the_click(rig: Rig, chat_id: str) -> None:
    worker = example_worker(rig, "careful:factory")
    try:
        asked = rig.sim.send_text(chat_id, "clean the build")
        card = reply_to(rig, chat_id, asked, "interactive")
        assert "Delete `build/`?" in card.text
        rig.sim.send_card_action(chat_id, card.message_id, "ou_user_1", button(card, "once"))
        answer = wait_until(lambda: [m.text for m in rig.sim.sent_messages(chat_id)
                                     if m.reply_to == asked and m.msg_type != "interactive"],
                            30, "the answer after the click")
        assert answer == ["Deleted build/ (pretend)."]
    finally:
        worker.kill()


def test_the_reporting_example_answers_with_a_picture_and_a_file(rig: Rig, chat_id: str) -> None:
    worker = example_worker(rig, "reporter:factory")
    try:
        asked = rig.sim.send_text(chat_id, "the sales, please")
        image = reply_to(rig, chat_id, asked, "image")
        file = reply_to(rig, chat_id, asked, "file")
        text = next(m for m in rig.sim.sent_messages(chat_id)
                    if m.reply_to == asked and m.msg_type not in ("image", "file"))
        assert "This week's sales" in text.text and "no old chart: image" in text.text
        assert image.text.startswith("[image sales.png") and file.text.startswith(
            "[file sales.csv")
        assert rig.sim.resource_of(file.message_id) == b"day,sales\r\nMon,12\r\nTue,19\r\n" \
            b"Wed,7\r\nThu,15\r\nFri,22\r\n"
    finally:
        worker.kill()


def test_the_progress_example_lists_its_steps_on_the_finished_card(rig: Rig,
                                                                   chat_id: str) -> None:
    worker = example_worker(rig, "researcher:factory")
    try:
        asked = rig.sim.send_text(chat_id, "when do we deploy?")
        card = reply_to(rig, chat_id, asked, "interactive")
        view = rig.sim.wait_for_card(card.message_id, streaming=False, timeout_s=30)
        text = json.dumps(view.card, ensure_ascii=False)
        assert "What the wiki says" in text and "Deploys go out on Tuesdays" in text
        assert "2 steps" in text and "reading deploy" in text, text
    finally:
        worker.kill()
