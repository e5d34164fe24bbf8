"""An agent that says what it is doing while it works (`turn.progress`,
docs/agents.md#progress): each step shows above the answer as it streams, and the finished
card lists them with their times.

Run it: PYTHONPATH=docs/examples GATEWAY_AGENT=researcher:factory feishu-gateway demo
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from gateway.core.model import AgentContext, Turn

WIKI = {"deploy": "Deploys go out on Tuesdays, after the tests pass.",
        "holidays": "The office is closed between Christmas and New Year."}


def search(question: str) -> list[str]:
    """The wiki pages a question names (a stand-in for a real search)."""
    return [title for title in WIKI if title in question.lower()] or list(WIKI)


class Researcher:
    def run(self, turn: Turn) -> Iterator[str]:
        turn.progress("searching the wiki…")
        pages = search(turn.text)
        found = []
        for title in pages:
            if turn.cancelled():  # /stop: stop early
                return
            turn.progress(f"reading {title}")  # shortened to one line of 80 characters
            time.sleep(0.3)  # (the reading a real agent does)
            found.append(f"- **{title}**: {WIKI[title]}")
        yield "What the wiki says:\n"
        yield "\n".join(found)


def factory(session_key: str, context: AgentContext) -> Researcher:
    return Researcher()
