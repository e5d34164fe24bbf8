"""The default agent: replies `echo: <text>`."""

from __future__ import annotations

from gateway.types import Turn


class EchoAgent:
    def run(self, turn: Turn) -> str | None:
        return f"echo: {turn.text}"


def factory(session_key: str) -> EchoAgent:
    return EchoAgent()
