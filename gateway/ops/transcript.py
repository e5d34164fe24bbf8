"""What the demo's terminal shows of a chat: the bot's messages as the simulator records them
(replies, message edits, streaming cards as they grow, approval cards), printed once each and
then only what changed, their markdown drawn (gateway/ops/markdown_text.py). Not
thread-safe: its owner serialises the calls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from gateway.feishu.outbound.stream_card import CURRENT_MARK, INTERRUPTED_MARK, STOPPED_MARK
from gateway.ops.markdown_text import terminal_text
from gateway.worker.streaming import FAILED_MARK

if TYPE_CHECKING:
    from gateway.simulator import SentMessage

INDENT = "     "
"""Under "bot: ": the next lines of one message."""
DONE = "(done)"
APPROVAL_HINT = (INDENT + "answer /approve or /deny here (or use the card's buttons in the "
                 "web chat)")


def approval_prompt(message: SentMessage) -> str | None:
    """The question of an approval card (its buttons carry a request_id); None for any
    other message."""
    if message.msg_type != "interactive" or message.card_id is not None:
        return None
    if not _has_request_button(message.content):
        return None
    for element in message.content.get("elements", ()):
        text = element.get("text") if isinstance(element, dict) else None
        if element.get("tag") == "div" and isinstance(text, dict):
            return str(text.get("content", ""))
    return message.text


def _has_request_button(node: Any) -> bool:
    if isinstance(node, dict):
        value = node.get("value")
        if node.get("tag") == "button" and isinstance(value, dict) and "request_id" in value:
            return True
        return any(_has_request_button(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_request_button(v) for v in node)
    return False


def split_mark(text: str) -> tuple[str, str]:
    """A closed streamed answer's text and the mark under it ("" when it ended well)."""
    for mark in (STOPPED_MARK, INTERRUPTED_MARK, FAILED_MARK):
        if text.endswith(mark):
            return text[:-len(mark)].rstrip("\n"), mark
    by = _STOPPED_BY.search(text)  # "⏹ Stopped by <at id=ou_…></at>" (a Stop click)
    if by is not None:
        return text[:by.start()].rstrip("\n"), f"⏹ Stopped by {by.group(1)}"
    return text, ""


_STOPPED_BY = re.compile(r"⏹ Stopped by <at id=([^>]*)></at>$")


@dataclass
class _Shown:
    seen: str
    """Its text when it was last looked at."""
    text: str
    """What was printed of it (a closed card's mark and its current step left out)."""
    streaming: bool = False
    approval: bool = False
    step: str = ""
    """The current step printed last (a streaming answer's `turn.progress`)."""
    begun: bool = True
    """Its text was begun ("bot: "): not yet while only a step was shown."""


def split_step(text: str) -> tuple[str, str]:
    """A streaming answer's current step (the ⏳ line above it) and the answer so far."""
    if not text.startswith(f"{CURRENT_MARK} "):
        return "", text
    head, _, rest = text.partition("\n\n")
    return head[len(CURRENT_MARK) + 1:], rest


class Transcript:
    def __init__(self, out: TextIO, *, prompt: bool, styled: bool = False) -> None:
        """`styled`: markdown's bold, italics and code drawn with a terminal's styles
        (else as plain text: gateway/ops/markdown_text.py)."""
        self.out = out
        self._with_prompt = prompt
        self._styled = styled
        self._shown: dict[str, _Shown] = {}
        self._open: str | None = None
        """The message whose text the cursor stands after (a streamed answer growing)."""
        self._fresh = True
        """The cursor is at the start of a line."""
        self._owed = True
        """The bot (or the demo) wrote since the last prompt."""

    def show(self, message: SentMessage) -> None:
        """Print `message` if it is new, else what changed in it since it was printed."""
        shown = self._shown.get(message.message_id)
        if shown is None:
            self._first(message)
        elif message.text == shown.seen and message.streaming == shown.streaming:
            return
        elif shown.approval:  # decided, expired or stopped
            self._line(f"bot: {(message.text.splitlines() or [''])[0]}")
        else:
            self._changed(message, shown)
        self._shown[message.message_id].seen = message.text
        self._owed = True

    def _first(self, message: SentMessage) -> None:
        question = approval_prompt(message)
        if question is not None:
            self._shown[message.message_id] = _Shown(message.text, message.text,
                                                     approval=True)
            self._line(f"bot asks: {question}")
            self._line(APPROVAL_HINT)
        elif message.streaming:
            step, body = split_step(message.text)
            body = self._drawn(body, final=False)
            self._shown[message.message_id] = _Shown(message.text, body, streaming=True,
                                                     step=step)
            if step:
                self._line(f"bot: ({step})")
            if body or not step:
                self._begin(message.message_id, body)
            else:
                self._shown[message.message_id].begun = False
        else:
            body, mark = split_mark(message.text) if message.card_id else (message.text, "")
            body = self._drawn(body, final=True)
            self._shown[message.message_id] = _Shown(message.text, body)
            self._begin(message.message_id, body)
            self._end(message.message_id, mark or DONE if message.card_id else "")

    def _changed(self, message: SentMessage, shown: _Shown) -> None:
        ended = shown.streaming and not message.streaming
        body, mark = split_mark(message.text) if ended or not message.card_id else (
            message.text, "")
        if message.streaming:  # its current step on a line of its own, once each
            step, body = split_step(body)
            if step and step != shown.step:
                self._line(f"bot: ({step})")
                self._open = None
            shown.step = step
        body = self._drawn(body, final=not message.streaming)
        if not shown.begun:
            if body:
                self._begin(message.message_id, body)
                shown.begun = True
        elif body.startswith(shown.text):
            self._grow(message.message_id, body[len(shown.text):])
        else:  # rewritten, not grown: shown again in full
            self._begin(message.message_id, body, label="bot (now)")
        shown.text, shown.streaming = body, message.streaming
        if ended:
            self._end(message.message_id, mark or DONE)
        elif not message.streaming and mark:
            self._end(message.message_id, mark)

    def _drawn(self, text: str, *, final: bool) -> str:
        """Markdown as the terminal shows it (a growing answer: what more text cannot
        change)."""
        return terminal_text(text, final=final, styled=self._styled)

    def note(self, text: str) -> None:
        """A line of the demo's own, between the bot's messages."""
        self._line(text)

    def user_line(self) -> None:
        """The user ended a line on the terminal: its cursor is at the start of a new one."""
        self._open, self._fresh, self._owed = None, True, False

    def continued(self) -> None:
        """The user's message goes on past the line they ended: "… " where they type on."""
        self._write("… ")
        self._open, self._fresh, self._owed = None, False, False
        self.out.flush()

    def prompt(self) -> None:
        """"> " on a terminal, once the bot wrote and nothing is being written."""
        if self._with_prompt and self._owed and self._fresh and self._open is None:
            self._write("> ")
            self._fresh, self._owed = False, False
        self.out.flush()

    def _write(self, text: str) -> None:
        self.out.write(text)

    def _new_line(self) -> None:
        if not self._fresh:
            self._write("\n")
        self._open, self._fresh = None, True

    def _line(self, text: str) -> None:
        self._new_line()
        self._write(text + "\n")

    def _body(self, text: str) -> None:
        self._write(text.replace("\n", "\n" + INDENT))
        self._fresh = False

    def _begin(self, message_id: str, text: str, label: str = "bot") -> None:
        self._new_line()
        self._write(f"{label}: ")
        self._body(text)
        self._open = message_id

    def _grow(self, message_id: str, added: str) -> None:
        if not added:
            return
        if self._open != message_id:  # something came in between: go on on a new line
            self._new_line()
            self._write("bot: …")
            self._open = message_id
        self._body(added)

    def _end(self, message_id: str, mark: str) -> None:
        """Close the message: a streamed answer with its mark under it."""
        if mark and self._open != message_id:  # something came in between
            self._new_line()
            self._write("bot: …")
        if mark:
            self._write("\n" + INDENT + mark)
        self._write("\n")
        self._open, self._fresh = None, True
