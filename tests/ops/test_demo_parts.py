"""The demo's parts on their own: what the terminal prints of the bot's messages, how the
demo names the commands it suggests, a process that exits while starting. (Its agent:
agents/test_showcase.py.)"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest

from gateway.approvals.card import pending_card, resolved_card
from gateway.feishu.outbound.stream_card import CURRENT_MARK, INTERRUPTED_MARK, STOPPED_MARK
from gateway.ops.demo import script
from gateway.ops.processes import GatewayProcess, StartFailed, wait_ready
from gateway.ops.terminal import gather
from gateway.ops.transcript import Transcript, split_mark
from gateway.simulator import SentMessage
from gateway.simulator.payloads import flatten_text


def message(text: str, *, mid: str = "om_b1", streaming: bool = False,
            card: bool = False) -> SentMessage:
    return SentMessage(mid, "oc_1", "interactive" if card else "text", {}, text,
                       reply_to="om_1", card_id="card_1" if card else None,
                       streaming=streaming)


def card_message(content: dict[str, object], mid: str = "om_b2") -> SentMessage:
    return SentMessage(mid, "oc_1", "interactive", dict(content),
                       flatten_text("interactive", content), reply_to="om_1")


def test_the_terminal_shows_a_streamed_answer_growing_then_its_mark() -> None:
    out = io.StringIO()
    screen = Transcript(out, prompt=False)
    screen.show(message("Hello", streaming=True, card=True))
    screen.show(message("Hello wor", streaming=True, card=True))
    screen.show(message("Hello wor", streaming=True, card=True))
    grown = out.getvalue()
    screen.show(message("Hello world\nline two", streaming=True, card=True))
    screen.show(message("Hello world\nline two\n" + STOPPED_MARK, card=True))
    screen.show(message("Hello world\nline two\n" + STOPPED_MARK, card=True))
    assert grown == "bot: Hello wor"
    assert out.getvalue() == f"bot: Hello world\n     line two\n     {STOPPED_MARK}\n"


def test_the_terminal_shows_replies_once_and_an_approval_card_with_how_to_answer() -> None:
    out = io.StringIO()
    screen = Transcript(out, prompt=False)
    screen.show(message("Nothing was running.", mid="om_c"))
    screen.show(message("Nothing was running.", mid="om_c"))
    screen.show(message("done at once", mid="om_d", card=True))
    asked = pending_card("r1", "Delete build/?", "oc_1")
    screen.show(card_message(asked))
    screen.show(card_message(asked))
    screen.show(card_message(resolved_card("Delete build/?", "once", "ou_1")))
    assert out.getvalue() == (
        "bot: Nothing was running.\n"
        "bot: done at once\n     (done)\n"
        "bot asks: Delete build/?\n"
        "     answer /approve or /deny here (or use the card's buttons in the web chat)\n"
        "bot: Approval allowed once\n")


def test_growth_after_another_message_goes_on_a_line_of_its_own() -> None:
    out = io.StringIO()
    screen = Transcript(out, prompt=True)
    screen.show(message("Asking", streaming=True, card=True))
    screen.show(message("Stopped.", mid="om_c"))
    screen.show(message("Asking you", streaming=True, card=True))
    screen.show(message("Asking you", card=True))
    screen.prompt()
    screen.prompt()
    screen.show(message("Asking you", card=True))
    screen.prompt()
    screen.show(message("Stopping", mid="om_e", streaming=True, card=True))
    out.write("/stop\n")  # the terminal echoes what the user types
    screen.user_line()
    screen.show(message("Stopping\n" + STOPPED_MARK, mid="om_e", card=True))
    assert out.getvalue() == ("bot: Asking\nbot: Stopped.\nbot: … you\n     (done)\n> \n"
                              f"bot: Stopping/stop\nbot: …\n     {STOPPED_MARK}\n")


def test_suggested_commands_are_runnable_from_another_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "feishu-gateway").write_text("#!/bin/sh\n")
    (bindir / "feishu-gateway").chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bindir / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)
    assert script("feishu-gateway") == os.path.join("venv", "bin", "feishu-gateway")
    assert script("celery") == os.path.join("venv", "bin", "python") + " -m celery"
    monkeypatch.setenv("PATH", str(bindir))
    assert script("feishu-gateway") == "feishu-gateway"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert script("feishu-gateway") == str(bindir / "feishu-gateway")


def test_a_process_that_exits_while_starting_is_named_at_once(tmp_path: Path) -> None:
    quits = GatewayProcess("worker", ["-c", "print('cannot start: because'); exit(3)"], {},
                           tmp_path)
    waits = GatewayProcess("listener", ["-c", "import time; time.sleep(30)"], {}, tmp_path)
    began = time.monotonic()
    try:
        with pytest.raises(StartFailed, match="the worker exited with code 3 while starting"):
            wait_ready({waits: "never", quits: "ready."}, timeout_s=20)
        assert time.monotonic() - began < 5
        assert "cannot start: because" in quits.tail()
        with pytest.raises(StartFailed, match="the listener was not ready after 0.2s"):
            wait_ready({waits: "never"}, timeout_s=0.2)
    finally:
        quits.stop()
        waits.stop(timeout_s=1)


def test_an_interrupted_answer_shows_its_mark_on_a_line_of_its_own() -> None:
    for mark in (STOPPED_MARK, INTERRUPTED_MARK):
        assert split_mark(f"part of it\n{mark}") == ("part of it", mark)
    assert split_mark("part of it\n⏹ Stopped by <at id=ou_ann></at>") == (
        "part of it", "⏹ Stopped by ou_ann")


def test_a_step_shows_once_on_a_line_of_its_own_and_the_answer_grows() -> None:
    """A streaming answer's current step (turn.progress) changes above it: each step is
    printed once, never the whole message again."""
    out = io.StringIO()
    screen = Transcript(out, prompt=False)
    screen.show(message(f"{CURRENT_MARK} searching", streaming=True, card=True))
    screen.show(message(f"{CURRENT_MARK} reading a\n\nFound", streaming=True, card=True))
    screen.show(message(f"{CURRENT_MARK} reading a\n\nFound it", streaming=True, card=True))
    screen.show(message(f"{CURRENT_MARK} reading b\n\nFound it.", streaming=True, card=True))
    screen.show(message("Found it.", card=True))
    assert out.getvalue() == ("bot: (searching)\nbot: (reading a)\nbot: Found it\n"
                              "bot: (reading b)\nbot: ….\n     (done)\n")


def test_a_message_going_on_past_a_line_shows_a_continuation_prompt() -> None:
    said: list[str] = []
    messages = list(gather(["one \\\n", "two\n", "```\n", "code\n", "```\n", "three\n"],
                           lambda: said.append("…")))
    assert messages == ["one \ntwo", "```\ncode\n```", "three"]
    assert said == ["…"] * 3, "after the backslash line and each line inside the fence"
