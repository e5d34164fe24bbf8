"""Messages the bot starts: `feishu-gateway send` and the `gateway.post_message` task (Celery
beat's example in docs/examples/reminders.py included), through a real listener, workers and
the simulator: each posts once per idempotency key, in the chat's order (after the answer a
turn is streaming), into a thread when told, and what cannot be sent is one clear line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from gateway.broker.names import POST_MESSAGE
from gateway.ops.processes import REPO, GatewayProcess, wait_until
from gateway.simulator import SentMessage, Simulator
from tests.support.agents import TINY_PNG
from tests.support.cli import cli, ok
from tests.support.replies import reply_of
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, concurrency=3) as rig:
        yield rig


def posts(sim: Simulator, chat: str, text: str) -> list[SentMessage]:
    """The bot's messages in `chat` that say `text` (not replies to a user)."""
    return [m for m in sim.sent_messages(chat) if text in m.text]


def test_send_posts_once_per_key_in_the_chats_order(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_outbound_order"
    streaming = sim.send_text(chat, "stream 6 0.4")
    wait_until(lambda: any(m.reply_to == streaming for m in sim.sent_messages(chat)), 20,
               "the answer's card to start streaming")
    said = ok(rig.env, "send", chat, "Build **42** passed", "--key", "build-42")
    assert "build-42" in said
    again = ok(rig.env, "send", chat, "Build **42** passed", "--key", "build-42")
    assert "already" in again
    wait_until(lambda: posts(sim, chat, "Build"), 30, "the post", interval_s=0.01)
    [card] = [m for m in sim.sent_messages(chat) if m.reply_to == streaming]
    assert not card.streaming and card.text.startswith("w0 w1 w2 w3 w4 w5"), \
        "when the post shows, the streamed answer has ended: never in its middle"
    [post] = posts(sim, chat, "Build")
    assert post.reply_to is None, "a message of its own, not a reply"
    assert len(posts(sim, chat, "Build")) == 1, "one post for the key, run twice"


def test_send_posts_a_card_and_into_a_thread(rig: Rig, tmp_path: Path) -> None:
    sim, chat = rig.sim, "oc_outbound_thread"
    asked = sim.send_text(chat, "start a topic", chat_type="group", thread_id=None)
    reply_of(sim, chat, asked)
    topic = sim.send_text(chat, "in the topic", chat_type="group", root_id=asked,
                          parent_id=asked, thread_id="omt_outbound1")
    reply_of(sim, chat, topic)
    ok(rig.env, "send", chat, "Deploy done", "--thread", "omt_outbound1", "--key", "t-1")
    wait_until(lambda: posts(sim, chat, "Deploy done"), 30, "the post")
    [post] = posts(sim, chat, "Deploy done")
    assert post.thread_id == "omt_outbound1" and post.in_thread
    card = {"schema": "2.0", "body": {"elements": [
        {"tag": "markdown", "content": "Nightly report: **green**"}]}}
    path = tmp_path / "card.json"
    path.write_text(json.dumps(card))
    ok(rig.env, "send", chat, "--card", str(path), "--key", "card-1")
    wait_until(lambda: posts(sim, chat, "Nightly"), 30, "the card")
    [sent] = posts(sim, chat, "Nightly")
    assert sent.msg_type == "interactive"
    chart, data = tmp_path / "chart.png", tmp_path / "numbers.csv"
    chart.write_bytes(TINY_PNG)
    data.write_bytes(b"n\n1\n")
    ok(rig.env, "send", chat, "--image", str(chart), "--thread", "omt_outbound1", "--key", "i-1")
    ok(rig.env, "send", chat, "--file", str(data), "--key", "f-1")
    ok(rig.env, "send", chat, "--file", str(data), "--key", "f-1")  # (posted already)
    wait_until(lambda: posts(sim, chat, "[image chart.png") and posts(sim, chat, "[file numbers"),
               30, "the image and the file")
    [image] = posts(sim, chat, "[image chart.png")
    [file] = posts(sim, chat, "[file numbers")
    assert image.thread_id == "omt_outbound1" and file.reply_to is None
    assert sim.resource_of(image.message_id) == TINY_PNG
    assert sim.resource_of(file.message_id) == b"n\n1\n"
    assert sent.reply_to is None


def test_what_cannot_be_sent_is_one_clear_line(rig: Rig, tmp_path: Path) -> None:
    for argv, said in [
            (("send", "not-a-chat", "hi"), "is no chat id"),
            (("send", "oc_outbound_bad"), "say one thing"),
            (("send", "oc_outbound_bad", "hi", "--thread", "omt_gone"), "thread omt_gone"),
            (("send", "oc_outbound_bad", "--card", str(tmp_path / "none.json")),
             "No such file"),
            (("send", "oc_outbound_bad", "hi", "--app", "cli_nobody"), "not one of"),
            (("send", "oc_outbound_bad", "--image", str(tmp_path / "none.png")),
             "cannot be read"),
            (("send", "oc_outbound_bad", "hi", "--image", str(tmp_path / "none.png")),
             "say one thing"),
    ]:
        result = cli(rig.env, *argv)
        assert result.returncode != 0 and said in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr
    sim, chat = rig.sim, "oc_outbound_left"
    sim.remove_bot(chat, deliver=False)  # (the platform knows; the gateway does not yet)
    ok(rig.env, "send", chat, "anyone there?", "--key", "left-1")
    client = rig.client()
    wait_until(lambda: any("oc_outbound_left" in raw for raw in client.lrange(
        "gw:undelivered", 0, -1)), 30, "the post recorded as undelivered")
    assert posts(sim, chat, "anyone there?") == []


def test_the_post_task_posts_once_per_key_and_the_beat_example_runs(
        rig: Rig, tmp_path_factory: pytest.TempPathFactory) -> None:
    sim = rig.sim
    app = Celery(broker=rig.env["REDIS_URL"])
    app.conf.task_routes = {POST_MESSAGE: {"queue": "gateway.turns"}}
    try:
        for _ in range(2):  # a scheduler that retried: same key
            app.send_task(POST_MESSAGE, args=("oc_outbound_task", "Backup finished"),
                          kwargs={"key": "backup-7"})
        same_id = "post-task-redelivered"
        for _ in range(2):  # a task delivered twice: same task id, no key
            app.send_task(POST_MESSAGE, args=("oc_outbound_task", "Disk at 91%"),
                          task_id=same_id)
    finally:
        app.close()
    wait_until(lambda: posts(sim, "oc_outbound_task", "Backup") and posts(
        sim, "oc_outbound_task", "Disk"), 30, "both posts")
    beat_dir = tmp_path_factory.mktemp("beat")
    with pytest.MonkeyPatch.context() as patch:  # (as the example's docstring runs it)
        patch.setenv("PYTHONPATH", str(REPO / "docs" / "examples"))
        beat = GatewayProcess("beat", ["-m", "celery", "-A", "reminders", "beat", "-s",
                                       str(beat_dir / "schedule"), "--loglevel", "INFO"],
                              {**rig.env, "REMINDER_CHAT": "oc_outbound_beat",
                               "REMINDER_EVERY_S": "1"}, beat_dir)
    try:
        wait_until(lambda: len(posts(sim, "oc_outbound_beat", "Stand-up")) >= 3, 40,
                   "three reminders")
    finally:
        beat.stop()
    assert len(posts(sim, "oc_outbound_task", "Backup")) == 1
    assert len(posts(sim, "oc_outbound_task", "Disk")) == 1
    reminders = posts(sim, "oc_outbound_beat", "Stand-up")
    assert len({m.uuid for m in reminders}) == len(reminders), "each run is its own post"
