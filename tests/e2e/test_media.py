"""Agents send images and files (gateway/core/media.py, gateway/worker/media_sender.py): uploaded
through the open API and shown as replies in the turn's thread, each exactly once when a
worker is SIGKILLed after an upload or after a send, a kept answer sent again without a
second upload; what Feishu would not take is one clear error to the agent."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator import SentMessage, Simulator
from tests.support.agents import TINY_PNG
from tests.support.replies import reply_of
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory) as rig:
        yield rig


def answers(sim: Simulator, chat: str, message_id: str) -> list[SentMessage]:
    return [m for m in sim.sent_messages(chat) if m.reply_to == message_id]


def kinds(sim: Simulator, chat: str, message_id: str) -> list[str]:
    return [m.msg_type for m in answers(sim, chat, message_id)]


def media_answered(sim: Simulator, chat: str, message_id: str) -> bool:
    return {"image", "file"} <= set(kinds(sim, chat, message_id))


def test_an_answer_with_an_image_and_a_file_reaches_the_topic(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_media_plain"
    asked = sim.send_text(chat, "media", chat_type="group", thread_id="omt_media1")
    wait_until(lambda: media_answered(sim, chat, asked), 30, "the image and the file")
    text, image, file = answers(sim, chat, asked)  # (its text: a message, or a card)
    assert "here you go" in text.text and (image.msg_type, file.msg_type) == ("image", "file")
    assert sim.resource_of(image.message_id) == TINY_PNG
    assert sim.resource_of(file.message_id) == b"a,b\n1,2\n"
    assert all(m.thread_id == "omt_media1" for m in (text, image, file)), "in its topic"
    now = sim.send_text(chat, "sendnow")
    wait_until(lambda: len(answers(sim, chat, now)) == 2, 30, "the image and the answer")
    image, said = answers(sim, chat, now)
    assert (image.msg_type, said.msg_type) == ("image", "text"), "at once, then the answer"
    assert said.text == f"sent {image.message_id[:3]}"
    bad = sim.send_text(chat, "badmedia")
    assert reply_of(sim, chat, bad).startswith("refused: image (bytes) is not a PNG")


@pytest.mark.parametrize("when", ["after the upload", "after the image was sent"])
def test_a_worker_killed_mid_media_shows_each_part_once(rig: Rig, when: str) -> None:
    sim, chat = rig.sim, f"oc_media_kill_{when.split()[-1]}"
    killed = threading.Event()

    def kill(*_: object) -> None:
        if not killed.is_set():
            killed.set()
            for worker in rig.fleet.workers():
                worker.kill()  # (supervised: started again)

    uploads = sim.upload_count
    if when == "after the upload":
        sim.on_upload(kill)
    else:
        sim.on_bot_message(lambda m: kill() if m.msg_type == "image" else None)
    try:
        asked = sim.send_text(chat, "media")
        wait_until(killed.is_set, 30, "the kill")
        wait_until(lambda: media_answered(sim, chat, asked), 60, "the image and the file")
    finally:
        sim.on_upload(None)
        sim.on_bot_message(None)
    shown = kinds(sim, chat, asked)  # (its text: a message, or the card it streamed in)
    assert sorted(shown) in (["file", "image", "text"], ["file", "image", "interactive"]), \
        f"each part once: {shown}"
    if when == "after the upload":
        assert sim.upload_count - uploads >= 3, "the agent ran again and uploaded again"
    else:
        assert sim.upload_count - uploads == 2, "the kept answer was sent with its keys"
