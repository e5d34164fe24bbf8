"""The demo's agent (`GATEWAY_AGENT=showcase`): it shows what the gateway does with an agent
that streams, asks and takes its time, with no model, no credentials and no network.

- Every answer streams piece by piece (the chat shows it growing).
- A message asking to delete something ("delete build/") asks for approval first
  (`Turn.approve`: a card with buttons; /approve or /deny work too), then pretends.
- "slow" streams for about SLOW_S seconds, checking `Turn.cancelled()` often, so /stop can
  be tried (and the "Typing" reaction on the message is seen meanwhile).
- "chart" answers with a picture: a bar chart drawn on the spot (an `Image` part).
- "book" asks a form (`Turn.ask`: a card with a text, a select, a date and a checkbox) and
  answers with what was filled in.
- A reaction on one of its answers is logged by the factory's `on_reaction` hook.
- The first answer of a session says what to try.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

from gateway.agents.chart import bar_chart
from gateway.core.media import Image
from gateway.core.model import AgentContext, FormField, Reaction, Turn

logger = logging.getLogger(__name__)

WORD_DELAY_S = 0.04
"""Between two streamed words: an answer visibly grows, yet a short one ends in a second."""
SLOW_S = 20.0
SLOW_STEPS = 40
CHECK_S = 0.05
"""How often a pause looks at `Turn.cancelled()`."""
SHOWN_S = 0.4
"""A pause before asking: past the stream interval, so what came so far is shown first."""
APPROVE_TIMEOUT_S = 300.0
CHART_VALUES = (3, 5, 9, 14, 11, 7, 12, 16, 10, 6)

INTRO = ("Hi, I am the showcase agent (nothing here calls a model or the network). "
         "Things to try:\n"
         "- **delete build/**: I ask for your approval first (a card; answer with its "
         "buttons, or /approve or /deny)\n"
         "- **slow**: a {slow_s:.0f} s answer; /stop stops it, and a Typing reaction shows "
         "on your message meanwhile\n"
         "- **chart**: I answer with a picture\n"
         "- **book**: I ask you to fill in a form\n"
         "- anything else: I stream it back word by word\n"
         "- /new starts a new conversation, /stop stops what runs\n\n")
BOOKING = (FormField("topic", "What to review", required=True, max_chars=200,
                     placeholder="e.g. the release notes"),
           FormField("length", "How long", "select", required=True,
                     options=("15 minutes", "30 minutes", "an hour")),
           FormField("day", "Which day", "date"),
           FormField("remind", "Remind me the day before", "checkbox"))
DELETE = re.compile(r"\b(?:delete|remove|rm)\s+(\S+)", re.IGNORECASE)
ALLOWED = frozenset({"once", "session", "always"})


def words(text: str) -> Iterator[str]:
    """`text` in pieces of one word each, its spacing kept (they join back to `text`)."""
    yield from (m.group(0) for m in re.finditer(r"\s*\S+\s*", text))


class ShowcaseAgent:
    def __init__(self, *, word_delay_s: float = WORD_DELAY_S, slow_s: float = SLOW_S) -> None:
        self.word_delay_s, self.slow_s = word_delay_s, slow_s
        self.greeted = False

    def run(self, turn: Turn) -> Iterator[str | Image]:
        greet, self.greeted = not self.greeted, True
        return self._answer(turn, greet)

    def _answer(self, turn: Turn, greet: bool) -> Iterator[str | Image]:
        if greet:
            yield from self._say(turn, INTRO.format(slow_s=self.slow_s))
        text = turn.text.strip()
        target = DELETE.search(text)
        if target is not None:
            yield from self._delete(turn, target.group(1))
        elif text.lower() == "slow":
            yield from self._slow(turn)
        elif text.lower() == "book":
            yield from self._book(turn)
        elif text.lower() == "chart":
            yield from self._say(turn, "Messages per hour today, drawn just now:")
            yield Image(bar_chart(CHART_VALUES), name="chart.png")
        else:
            yield from self._say(turn, f"You said: {text}")

    def _say(self, turn: Turn, text: str) -> Iterator[str]:
        for word in words(text):
            if turn.cancelled():
                return
            yield word
            _pause(turn, self.word_delay_s)

    def _delete(self, turn: Turn, target: str) -> Iterator[str]:
        yield from self._say(turn, f"Deleting `{target}` needs your approval; asking you. ")
        _pause(turn, SHOWN_S)
        yield ""  # a piece after the pause: the text so far shows before the question
        decision = turn.approve(f"Delete {target}? (a pretend action: nothing is deleted)",
                                APPROVE_TIMEOUT_S, key=f"delete {target}")
        if decision in ALLOWED:
            # (the card shows how it was allowed: not said again)
            yield from self._say(turn, f"I pretended to delete `{target}`.")
        elif decision == "expired":
            yield from self._say(turn, f"Nobody answered in time: `{target}` stays.")
        else:
            yield from self._say(turn, f"`{target}` stays.")

    def _book(self, turn: Turn) -> Iterator[str]:
        yield from self._say(turn, "Let us book a review; a form follows. ")
        _pause(turn, SHOWN_S)
        yield ""  # (the text so far shows before the form)
        answer = turn.ask("Book a review", BOOKING, timeout_s=APPROVE_TIMEOUT_S)
        if not answer.submitted:
            yield from self._say(turn, "No booking: the form "
                                 f"{'expired' if answer.state == 'expired' else 'was stopped'}.")
            return
        v = answer.values
        day = v.get("day") or "a day to be agreed"
        remind = ", with a reminder." if v.get("remind") else "."
        yield from self._say(turn, f"Booked **{v.get('topic')}** ({v.get('length')}) on "
                                   f"{day}{remind}")

    def _slow(self, turn: Turn) -> Iterator[str]:
        yield from self._say(turn, f"Taking my time (about {self.slow_s:.0f} s; /stop "
                                   "stops me):")
        for step in range(1, SLOW_STEPS + 1):
            if not _pause(turn, self.slow_s / SLOW_STEPS):
                return
            yield f" {step}"
        yield from self._say(turn, " — done, nobody stopped me.")


def _pause(turn: Turn, seconds: float) -> bool:
    """Wait `seconds`, looking at `turn.cancelled()` every CHECK_S; False when cancelled."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if turn.cancelled():
            return False
        time.sleep(min(CHECK_S, left))
    return not turn.cancelled()


class ShowcaseFactory:
    def __call__(self, session_key: str, context: AgentContext) -> ShowcaseAgent:
        return ShowcaseAgent()

    def on_reaction(self, reaction: Reaction, context: AgentContext) -> None:
        """A reaction on one of its answers: logged (a real agent would learn from it)."""
        logger.info("showcase: %s %s on the answer to %s", reaction.emoji,
                    "added" if reaction.added else "taken back", reaction.turn_message_id)


factory = ShowcaseFactory()
