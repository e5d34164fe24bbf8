"""The default agent: replies `echo: <text>`."""

from __future__ import annotations

from gateway.core.model import AgentContext, Turn


class EchoAgent:
    def run(self, turn: Turn) -> str | None:
        return f"echo: {turn.text}"


class EchoFactory:
    stateless = True
    """Its agents keep nothing of a session between turns (see `Agent`)."""

    def __call__(self, session_key: str, context: AgentContext) -> EchoAgent:
        return EchoAgent()


factory = EchoFactory()
