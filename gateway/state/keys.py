"""Redis key names. Per-chat keys carry the hash tag `{chat_id}`; the order of `ChatKeys.all`
is the KEYS order every per-chat script expects (see lua/chat.lua)."""

from __future__ import annotations

from dataclasses import dataclass

INDEX_KEY = "gw:chats"
"""Sorted set: chat_id → when (server ms) the sweeper should look at the chat next."""

CONTROL_KEY = "gw:control"
"""Stream of control jobs (commands, notices) for the listeners' control desks."""

UNDELIVERED_KEY = "gw:undelivered"
"""List of the newest replies that were given up (capped), for `feishu-gateway status`."""


@dataclass(frozen=True, slots=True)
class ChatKeys:
    chat_id: str

    @property
    def prefix(self) -> str:
        return f"gw:{{{self.chat_id}}}"

    @property
    def lease(self) -> str:
        return f"{self.prefix}:lease"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}:inbox"

    @property
    def fence(self) -> str:
        return f"{self.prefix}:fence"

    @property
    def tries(self) -> str:
        return f"{self.prefix}:tries"

    @property
    def stop(self) -> str:
        return f"{self.prefix}:stop"

    @property
    def answer(self) -> str:
        return f"{self.prefix}:answer"

    @property
    def generation(self) -> str:
        return f"{self.prefix}:gen"

    def command(self, command_id: str) -> str:
        """What one stop command did (so running it again finishes it, never repeats it)."""
        return f"{self.prefix}:cmd:{command_id}"

    def seen(self, message_id: str) -> str:
        return f"{self.prefix}:seen:{message_id}"

    @property
    def all(self) -> list[str]:
        """KEYS 1-9 of every per-chat script."""
        return [self.lease, self.inbox, self.fence, self.tries, self.stop, self.answer,
                self.generation, INDEX_KEY, CONTROL_KEY]
