"""Events with no chat of their own yet, and reactions as feedback, in Redis: a reaction
or a bot menu click becomes a job for the control desk (lua/note.lua, deduped by the event's
id), and the desk records a reaction on the turn the answer answered (lua/feedback.lua),
where `feishu-gateway chat` shows it.
"""

from __future__ import annotations

from collections import defaultdict

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.store_types import text_of

REACTIONS_CAP = 500
"""The most reactions (turn, emoji, person) a chat keeps; past it new ones are not
recorded (counted and passed to the hook all the same)."""


class FeedbackSteps(ChatScripts):
    def note_event(self, slot: str, token: str, **job: str | int) -> str:
        """The listener's step for an event the desk finishes: `noted` (a job with the
        fields `job`, in the control stream of `slot`'s shard) or `duplicate` (the event
        named `token` came before)."""
        k = self.keys(slot)
        fields = [part for name, value in job.items() for part in (name, value)]
        return text_of(self._scripts["note"](
            keys=[k.click(f"note:{token}"), k.control],
            args=[self.config.dedupe_ttl_s, self.config.control_cap, *fields]))

    def note_reaction(self, app_id: str, event_id: str, message_id: str, emoji: str,
                      added: bool, by: str, at_ms: int) -> str:
        """A person's reaction on `message_id` (see `note_event`)."""
        return self.note_event(  # (the reacted message's slot: the chat is not known yet)
            message_id, event_id or f"{message_id}:{emoji}:{by}:{at_ms}:{int(added)}",
            kind="reaction", app=app_id, task=message_id, why=emoji,
            command="added" if added else "removed", fence=by, sent_ms=at_ms)

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
