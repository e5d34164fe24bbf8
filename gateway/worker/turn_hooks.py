"""The moments around a turn's agent that a concern may hook, as dramatiq's middleware
hooks a message's: what the agent is shown of a message, and the agent's run itself. A hook
minds only the moments it overrides; `TurnRunner` calls its hooks in order."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.core.model import Message

AgentEnded = Callable[[bool], None]
"""Called once the agent ended, with whether it failed."""


class TurnHook:
    """One concern around each turn's agent; every moment a no-op here."""

    def shown(self, message: Message) -> Message:
        """`message` as the agent is shown it (each message a turn answers, in order)."""
        return message

    def agent_running(self, message: Message) -> AgentEnded | None:
        """The agent starts on `message`; returns what to call once it ended, or None."""
        return None


def shown(hooks: Sequence[TurnHook], message: Message) -> Message:
    """`message` as every hook in turn shapes it for the agent."""
    for hook in hooks:
        message = hook.shown(message)
    return message


def agent_running(hooks: Sequence[TurnHook], message: Message) -> AgentEnded:
    """Every hook told the agent starts; the returned call tells each, in reverse, that it
    ended."""
    ends = [end for hook in hooks if (end := hook.agent_running(message)) is not None]

    def ended(failed: bool) -> None:
        for end in reversed(ends):
            end(failed)
    return ended
