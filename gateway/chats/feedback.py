"""Reactions as feedback, in Redis: a reaction event becomes a job for the control desk
(lua/react.lua, deduped by the event's id), and the desk records it on the turn the answer
answered (lua/feedback.lua), where `feishu-gateway chat` shows it.
"""

from __future__ import annotations

from collections import defaultdict

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.model import text_of

REACTIONS_CAP = 500
"""The most reactions (turn, emoji, person) a chat keeps; past it new ones are not
recorded (counted and passed to the hook all the same)."""


class FeedbackSteps(ChatScripts):
    def note_reaction(self, app_id: str, event_id: str, message_id: str, emoji: str,
                      added: bool, by: str, at_ms: int) -> str:
        """The listener's step for a person's reaction on `message_id`: `noted` (a job for
        the desk) or `duplicate` (its event came before)."""
        k = self.keys(message_id)  # (the reacted message's slot: the chat is not known yet)
        token = event_id or f"{message_id}:{emoji}:{by}:{at_ms}:{int(added)}"
        return text_of(self._scripts["react"](
            keys=[k.click(f"react:{token}"), k.control],
            args=[app_id, message_id, emoji, "added" if added else "removed", by, at_ms,
                  self.config.dedupe_ttl_s, self.config.control_cap]))

    def record_reaction(self, chat_id: str, turn_message_id: str, emoji: str, added: bool,
                        by: str, at_ms: int) -> str:
        """Record a reaction on the answer to `turn_message_id` in chat (state id)
        `chat_id`: `recorded`, `older` or `full`."""
        return text_of(self._scripts["feedback"](
            keys=[self.keys(chat_id).reactions],
            args=[f"{turn_message_id}|{emoji}|{by}", at_ms, "1" if added else "0",
                  self.config.history_ttl_ms, REACTIONS_CAP]))

    def reactions(self, chat_id: str) -> dict[str, list[tuple[str, str]]]:
        """The reactions standing on the chat's answers: turn message id → [(emoji, who)],
        oldest first."""
        found: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
        for field, value in self.redis.hgetall(self.keys(chat_id).reactions).items():
            turn, _, rest = text_of(field).partition("|")
            emoji, _, by = rest.partition("|")
            at, _, present = text_of(value).partition(":")
            if present == "1" and at.isdigit():
                found[turn].append((int(at), emoji, by))
        return {turn: [(e, b) for _, e, b in sorted(marks)] for turn, marks in found.items()}
