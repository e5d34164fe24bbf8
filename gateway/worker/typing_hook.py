"""The "Typing" reaction as a turn hook: shown on the message while its agent runs, removed
after, with the failure mark when the agent failed (gateway/feishu/outbound/typist.py)."""

from __future__ import annotations

from gateway.core.model import Message
from gateway.feishu.outbound.typist import Typist
from gateway.worker.turn_hooks import AgentEnded, TurnHook


class TypingHook(TurnHook):
    def __init__(self, typist: Typist) -> None:
        self.typist = typist

    def agent_running(self, message: Message) -> AgentEnded:
        typing = self.typist.begin(message.message_id, message.app_id, message.chat_id)
        return lambda failed: self.typist.end(typing, failed=failed)
