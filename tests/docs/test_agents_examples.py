"""The agent examples of docs/agents.md run as written: each is executed and its agent
answers a turn (the form example, with a form filled in and one left to expire)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.core.model import FormAnswer, FormField, Message, Turn

DOCS = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def example(heading: str) -> dict[str, Any]:
    """The first python block under `heading`, executed: its names."""
    section = DOCS.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert code is not None, f"no example under {heading}"
    names: dict[str, Any] = {}
    exec(compile(code.group(1), f"agents.md#{heading}", "exec"), names)  # noqa: S102
    return names


def test_the_forms_example_books_what_was_filled_in_and_says_when_it_was_not() -> None:
    names = example("Forms")
    agent = names["factory"]("session", None)
    message = Message("om_1", "oc_1", "p2p", "ou_1", "text", "book")

    def filled(title: str, fields: Sequence[FormField], timeout_s: float) -> FormAnswer:
        assert title == "Book a review" and [f.name for f in fields][:2] == ["topic", "length"]
        return FormAnswer("submitted", {"topic": "notes", "length": "30 minutes"}, "ou_1")

    assert agent.run(Turn(message, 1, former=filled)) == (
        "Booked notes (30 minutes) on a day to agree.")
    assert agent.run(Turn(message, 1, former=lambda *_: FormAnswer("expired"))) == (
        "No booking (expired).")
