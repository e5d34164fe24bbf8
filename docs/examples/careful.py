"""An agent that asks the chat before it acts: an approval card, or /approve and /deny.

Run it: PYTHONPATH=docs/examples GATEWAY_AGENT=careful:factory feishu-gateway demo
then send "clean the build".
"""

from __future__ import annotations

from gateway.core.model import AgentContext, Turn

ALLOWED = ("once", "session", "always")


class Careful:
    def __init__(self, session_key: str) -> None:
        self.session_key = session_key

    def run(self, turn: Turn) -> str:
        if "build" not in turn.text.lower():
            return 'Ask me to "clean the build" and I will ask you first.'
        # A card with Allow once / Allow for this session / Always allow / Deny; the turn
        # waits here (its lease kept, /stop still works) until a decision or the timeout.
        decision = turn.approve("Delete `build/`?", timeout_s=120, key="delete-build")
        # (the card shows the decision: the answer does not say it again)
        if decision in ALLOWED:
            return "Deleted build/ (pretend)."
        return "Left build/ alone."  # "deny" or "expired"


def factory(session_key: str, context: AgentContext) -> Careful:
    return Careful(session_key)
