"""The demo's terminal chat with the simulator: typed lines are read on their own thread and
each message goes out as soon as it is complete (so /stop reaches a turn while its answer
streams), while the main thread prints the bot's side as the simulator records it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

from gateway.ops.transcript import Transcript

if TYPE_CHECKING:
    from gateway.simulator import Simulator

FENCE = "```"
CONTINUED = "\\"
HELP = ("type a message and Enter; end a line with \\ to go on with the next one, and a "
        "```fenced block``` (or a paste of one) is one message up to its closing ```; "
        "Ctrl-D quits")
POLL_S = 0.05
SETTLE_TIMEOUT_S = 60.0
"""At the end of the input: how long the turns still running may take to end."""
WATCHED_MESSAGES = 5
GLYPHS = {"DONE": "✓ done", "CrossMark": "✗ failed", "OK": "OK", "THUMBSUP": "+1"}
"""How a reaction of the bot's shows (Feishu draws its emoji_type as an icon), as the web
chat shows it."""
"""The user's last messages whose "Typing" reaction is looked for."""


def gather(lines: Iterable[str], more: Callable[[], None] | None = None) -> Iterator[str]:
    """Terminal lines → messages. A line ending in a backslash goes on with the next line; a
    line opening a ``` fence takes every line up to the closing fence; an empty line alone is
    no message. Layout (indents, blank lines inside) is kept exactly. `more` is called after
    each line that the message goes on past (a terminal shows a continuation prompt)."""
    held: list[str] = []
    fenced = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if fenced:
            held.append(line)
            fenced = not line.strip().startswith(FENCE)
        elif line.strip().startswith(FENCE):
            held.append(line)
            fenced = line.strip().count(FENCE) == 1  # ```x``` on one line is closed already
        elif line.endswith(CONTINUED):
            held.append(line[:-1])
            if more is not None:
                more()
            continue
        else:
            held.append(line)
        if fenced:
            if more is not None:
                more()
            continue
        text = "\n".join(held)
        held = []
        if text.strip():
            yield text
    if held and "\n".join(held).strip():
        yield "\n".join(held)  # Ctrl-D inside a block or after a backslash: sent as it is


Settled = Callable[[str, str], bool]
"""(message_id, text) → whether the bot is done with that message of the user."""


class TerminalChat:
    def __init__(self, sim: Simulator, chat_id: str, out: TextIO, *, settled: Settled,
                 typing_emoji: str = "Typing", poll_s: float = POLL_S) -> None:
        self.sim, self.chat_id, self.out = sim, chat_id, out
        self._settled, self._typing, self._poll_s = settled, typing_emoji, poll_s
        self._tty = out.isatty()
        self._transcript = Transcript(out, prompt=self._tty, styled=self._tty)
        self._lock = threading.Lock()
        self._sent: list[tuple[str, str]] = []
        self._reacted: set[tuple[str, str]] = set()
        """(message, emoji) of each reaction on the user's messages shown once."""
        self._done: set[str] = set()
        self._ended = threading.Event()

    def run(self, lines: TextIO, settle_timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Chat until the input ends and the bot is done with every message (or Ctrl-C)."""
        self.out.write(f"chat {self.chat_id}: {HELP}\n")
        with self._lock:
            self._transcript.prompt()
        threading.Thread(target=self._read, args=(lines,), name="demo-terminal-input",
                         daemon=True).start()
        deadline = None
        while True:
            self._show()
            if self._ended.is_set():
                deadline = deadline or time.monotonic() + settle_timeout_s
                if self._all_settled():
                    break
                if time.monotonic() > deadline:
                    self._note(f"(the bot is not done after {settle_timeout_s:.0f}s; "
                               "leaving)")
                    break
            time.sleep(self._poll_s)
        self._show()
        self.out.write("\n")
        self.out.flush()

    def _read(self, lines: TextIO) -> None:
        try:
            for text in gather(lines, self._more):
                if self._tty:  # the terminal echoed the Enter: its cursor is on a new line
                    with self._lock:
                        self._transcript.user_line()
                try:
                    message_id = self.sim.send_text(self.chat_id, text)
                except Exception as error:  # noqa: BLE001 (the reader's boundary: say it, read on)
                    self._note(f"(not delivered: {error})")
                    continue
                with self._lock:
                    self._sent.append((message_id, text))
        finally:
            self._ended.set()

    def _more(self) -> None:
        """The message goes on past the line just typed: a continuation prompt (terminal)."""
        if self._tty:
            with self._lock:
                self._transcript.continued()

    def _note(self, text: str) -> None:
        with self._lock:
            self._transcript.note(text)
            self._transcript.prompt()

    def _show(self) -> None:
        messages = self.sim.sent_messages(self.chat_id)
        with self._lock:
            for message in messages:
                self._transcript.show(message)
            for message_id, _ in self._sent[-WATCHED_MESSAGES:]:
                for emoji in self.sim.reactions(message_id):
                    if (message_id, emoji) in self._reacted:
                        continue
                    self._reacted.add((message_id, emoji))
                    self._transcript.note("(typing …)" if emoji == self._typing
                                          else f"(bot reacted: {GLYPHS.get(emoji, f':{emoji}:')})")
            self._transcript.prompt()

    def _all_settled(self) -> bool:
        with self._lock:
            sent = list(self._sent)
        for message_id, text in sent:
            if message_id not in self._done:
                if not self._settled(message_id, text):
                    return False
                self._done.add(message_id)
        return True
