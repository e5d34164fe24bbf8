"""A streaming agent: it answers in pieces, and the chat shows the answer as it grows.

Run it: PYTHONPATH=docs/examples GATEWAY_AGENT=shouter:factory feishu-gateway demo
"""

from __future__ import annotations

from collections.abc import Iterator

from gateway.core.model import AgentContext, Turn


class Shouter:
    """One per session (`<chat_id>#<generation>`), reused across that session's turns."""

    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self.turns = 0

    def run(self, turn: Turn) -> Iterator[str]:  # or return a str, or None for no reply
        self.turns += 1
        for word in turn.text.split():
            if turn.cancelled():  # /stop, or the turn lost its lease: stop early
                return
            yield word.upper() + " "

    def soft_release(self) -> None:  # optional: let go over the cap, idle, out of date
        pass  # drop clients and memory, keep what the session's next agent inherits

    def release(self) -> None:  # optional: /new and shutdown, a full teardown
        pass


def factory(session_key: str, context: AgentContext) -> Shouter:
    """The worker calls this for each new session; `context` is what the worker process
    hands every agent: its settings, its Redis client and its process id."""
    return Shouter(session_key)
