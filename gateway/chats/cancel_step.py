"""The state change of a stop (/stop, /new, `feishu-gateway stop`), one script recorded under
the command's id (lua/cancel.lua), and what it reports; gateway/chats/cancel.py acts on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.store_types import TurnRef, claimed_turn, text_of


@dataclass(frozen=True, slots=True)
class CancelStep:
    """What the cancel script did (see lua/cancel.lua)."""

    how: Literal["again", "debounced", "nothing", "not-started", "running"]
    fence: int | None
    task_id: str
    waiting: int
    following: TurnRef | None = None
    """The turn claimed after a turn that had not started was dropped, to be published."""
    recorded_how: str = ""


class CancelSteps(ChatScripts):
    def cancel(self, chat_id: str, command_id: str, *, debounce_ms: int, flag_ttl_ms: int,
               target_fence: int | str = "*", new_session: bool = False,
               only_queued: bool = False, sent_ms: int = 0,
               interrupt: str = "") -> CancelStep:
        """The state change of a stop (see lua/cancel.lua). `target_fence`: the turn the
        command is about ("" none held the chat when it was sent, "*" whatever holds it);
        `only_queued`: a running turn is left alone ('nothing'); `interrupt`: the id of the
        message that interrupts the running turn (busy mode interrupt; '': a stop)."""
        k = self.keys(chat_id)
        options = self.options("cancel", debounce_ms=debounce_ms, record_ttl_ms=flag_ttl_ms,
                               new_session=new_session, only_queued=only_queued,
                               sent_ms=sent_ms, interrupt=interrupt or False)
        reply = [text_of(v) for v in self._scripts["cancel"](
            keys=[*k.all, k.command(command_id), k.done],
            args=[command_id, chat_id, target_fence, options])]
        how = reply[0]
        if how == "again":
            return CancelStep("again", int(reply[2]) if reply[2] else None, reply[3],
                              int(reply[4]), recorded_how=reply[1])
        following = claimed_turn(chat_id, reply[4], reply[5]) if len(reply) > 5 else None
        return CancelStep(how, int(reply[1]) if reply[1] else None,  # type: ignore[arg-type]
                          reply[2], int(reply[3]), following)
