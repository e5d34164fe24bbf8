"""The showcase agent (the demo's): streamed pieces, a greeting once a session, approval
before it pretends to delete, a slow answer that ends soon after a stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace

import pytest

from gateway.agents import load_factory
from gateway.agents.showcase import ShowcaseAgent, words
from gateway.core.media import Image
from gateway.core.model import FormAnswer, FormField, Message, Turn
from tests.support.agents import context_for_tests


def turn(text: str, *, cancelled: threading.Event | None = None,
         asked: list[str] | None = None, decision: str = "once") -> Turn:
    def approver(prompt: str, timeout_s: float, key: str | None) -> str:
        if asked is not None:
            asked.append(prompt)
        return decision

    flag = cancelled or threading.Event()
    return Turn(Message("om_1", "oc_1", "p2p", "ou_1", "text", text), 1, flag.is_set,
                approver)


def joined(pieces: Iterable[object]) -> str:
    """The text of an answer's pieces (a picture apart)."""
    return "".join(p for p in pieces if isinstance(p, str))


def fast_agent() -> ShowcaseAgent:
    return ShowcaseAgent(word_delay_s=0, slow_s=2.0)


def test_showcase_streams_in_pieces_and_greets_once_a_session() -> None:
    built = load_factory("showcase")("chat:oc_1:0", context_for_tests())
    assert built.__class__ is ShowcaseAgent
    agent = fast_agent()
    first = list(agent.run(turn("hello there")))
    second = list(agent.run(turn("hello again")))
    assert len(first) > 10 and "Things to try" in joined(first)
    assert "delete build/" in joined(first) and "slow" in joined(first)
    assert joined(second) == "You said: hello again" and len(second) == 4
    assert joined(words("a  b\n c ")) == "a  b\n c "


@pytest.mark.parametrize(("decision", "says"), [
    ("once", "I pretended to delete `build/`."),
    ("session", "I pretended to delete `build/`."),
    ("deny", "`build/` stays."),
    ("expired", "Nobody answered in time: `build/` stays."),
])
def test_showcase_asks_before_it_pretends_to_delete(decision: str, says: str) -> None:
    agent, asked = fast_agent(), list[str]()
    agent.greeted = True
    answer = joined(agent.run(turn("please delete build/", asked=asked, decision=decision)))
    assert asked == ["Delete build/? (a pretend action: nothing is deleted)"]
    assert answer.startswith("Deleting `build/` needs your approval") and says in answer


def test_showcase_slow_answer_ends_soon_after_the_turn_is_cancelled() -> None:
    agent, cancelled = fast_agent(), threading.Event()
    agent.greeted = True
    pieces = agent.run(turn("slow", cancelled=cancelled))
    got = [next(pieces) for _ in range(8)]
    cancelled.set()
    began = time.monotonic()
    rest = list(pieces)
    assert time.monotonic() - began < 0.2
    assert "Taking my time" in joined(got) and "done" not in joined(rest)


def test_chart_answers_with_a_picture_after_its_text() -> None:
    agent = fast_agent()
    list(agent.run(turn("hello")))  # (the greeting)
    pieces = list(agent.run(turn("chart")))
    *text, picture = pieces
    assert "Messages per hour" in joined(text)
    assert isinstance(picture, Image) and picture.name == "chart.png"
    assert picture.data.startswith(b"\x89PNG\r\n\x1a\n")


def test_book_asks_a_form_and_answers_with_what_was_filled_in() -> None:
    asked: list[tuple[str, tuple[FormField, ...]]] = []

    def former(title: str, fields: Sequence[FormField], timeout_s: float) -> FormAnswer:
        asked.append((title, tuple(fields)))
        return FormAnswer("submitted", {"topic": "the notes", "length": "an hour",
                                        "remind": True}, "ou_1")

    agent = fast_agent()
    agent.greeted = True
    booked = joined(agent.run(replace(turn("book"), former=former)))
    assert asked and asked[0][0] == "Book a review"
    assert {f.kind for f in asked[0][1]} == {"text", "select", "date", "checkbox"}
    assert booked.endswith("Booked **the notes** (an hour) on a day to be agreed, with a "
                           "reminder.")
    stopped = joined(agent.run(replace(turn("book"), former=lambda *_: FormAnswer("expired"))))
    assert stopped.endswith("No booking: the form expired.")
