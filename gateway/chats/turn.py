"""A worker's steps through a turn: start it, keep its lease (heartbeat), keep its answer
before sending it, then complete it or hand it back; and whether it still holds its chat
(lua/start.lua, mark.lua, heartbeat.lua, answer.lua, complete.lua, handback.lua)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.store_types import (
    Answer,
    Completion,
    MergeWait,
    Started,
    TurnRef,
    claimed_turn,
    entry_message,
    entry_parts,
    text_of,
)

HeartbeatState = Literal["lost", "held", "stopped"]
_BEATS: tuple[HeartbeatState, ...] = ("lost", "held", "stopped")


def _started(reply: Sequence[Any]) -> Started:
    """start.lua's (and chat.lua's `begin`) reply: outcome, entry, gen, attempt, answer,
    and the merged batch (a JSON list of entries) when the turn took several messages."""
    outcome, entry = text_of(reply[0]), text_of(reply[1])
    answer = None
    if reply[4] is not None and reply[5] is not None:
        answer = Answer(text_of(reply[4]), tuple(json.loads(text_of(reply[5]))))
    batch: list[str] = []
    if len(reply) > 6 and reply[6] is not None:
        batch = [str(e) for e in json.loads(text_of(reply[6]))]
    merged = tuple(m for m in (entry_message(e) for e in batch) if m is not None)
    return Started(entry_parts(entry)[0], entry_message(entry), int(reply[2]), int(reply[3]),
                   exhausted=outcome == "poison", answer=answer, merged=merged,
                   merged_ids=tuple(entry_parts(e)[0] for e in batch))


class TurnSteps(ChatScripts):
    def start(self, turn: TurnRef, task_id: str, worker: str) -> Started | None:
        """Mark the turn running; None when its fence is stale or it already started. On
        a first attempt it runs the oldest waiting message (`Started.message_id`), which is
        not `turn.message_id` when an older one arrived after the claim. For a chat that
        may merge (busy modes merge, interrupt) use `start_or_wait`: here a wait is an
        error."""
        started = self.start_or_wait(turn, task_id, worker)
        if isinstance(started, MergeWait):
            raise RuntimeError(f"turn of chat {turn.chat_id} waits {started.ms} ms to merge")
        return started

    def start_or_wait(self, turn: TurnRef, task_id: str,
                      worker: str) -> Started | MergeWait | None:
        """`start`; under busy modes merge and interrupt, `MergeWait` while the chat's newest
        message is younger than the merge window (call again after it: nothing changed),
        then every waiting message as one turn (`Started.merged`), fixed for its re-runs."""
        reply = self._run("start", turn.chat_id, turn.fence, turn.chat_id, task_id, worker,
                          self.options("start"))
        how = text_of(reply[0])
        if how == "wait":
            return MergeWait(int(reply[1]))
        return None if how == "stale" else _started(reply)

    def mark_runner(self, chat_id: str, session: str) -> str:
        """This process starts a turn of the chat's `session` (an agent cache key): the mark
        moves here. Returns the process that started the session's previous turn ('' when
        none is remembered)."""
        c = self.config
        return text_of(self._scripts["mark"](keys=[self.keys(chat_id).runners],
                                             args=[session, self.runner, c.ran_ttl_ms,
                                                   c.ran_cap]))

    def heartbeat(self, turns: Sequence[TurnRef],
                  extend: Sequence[bool] | None = None) -> list[HeartbeatState]:
        """Report which running turns may go on (one round trip); extend the leases of those
        marked in `extend` (all of them by default)."""
        beat = self._scripts["heartbeat"]
        flags = ["1" if e else "0" for e in (extend or [True] * len(turns))]
        ttl = self.config.running_ttl_ms
        if len(turns) == 1:  # the usual case (prefork): no pipeline, no SCRIPT EXISTS
            turn = turns[0]
            return [_BEATS[int(beat(keys=self.keys(turn.chat_id).all,
                                    args=[turn.fence, ttl, flags[0], turn.chat_id]))]]
        states = self._batch("heartbeat", [
            (self.keys(turn.chat_id).all, [turn.fence, ttl, flag, turn.chat_id])
            for turn, flag in zip(turns, flags, strict=True)])
        return [_BEATS[int(state)] for state in states]

    def keep_answer(self, turn: TurnRef, answer: Answer) -> bool:
        """Store the answer before sending it; False when the turn may not reply."""
        return bool(self._run("answer", turn.chat_id, turn.fence, turn.message_id, answer.kind,
                              json.dumps(list(answer.chunks), ensure_ascii=False),
                              "1" if self.upgrade.now().mixed else ""))

    def hand_back(self, turn: TurnRef) -> TurnRef | None:
        """Give back a running turn whose reply this worker could not send before it shuts
        down: the chat is claimed again at once (a new fence) and returned, for the caller
        to publish; its re-run resends the kept answer. None when the turn no longer held
        the chat or nothing waits any more (it was stopped meanwhile)."""
        c = self.config
        k = self.keys(turn.chat_id)
        reply = self._scripts["handback"](keys=[*k.all, k.done], args=[
            turn.fence, c.claim_ttl_ms, turn.chat_id, c.history_cap, c.history_ttl_ms,
            c.queued_ttl_ms])
        if text_of(reply[0]) != "claimed":
            return None
        return claimed_turn(turn.chat_id, reply[1], reply[2])

    def complete(self, turn: TurnRef, run_next: tuple[str, str] | None = None, *,
                 outcome: str = "") -> Completion:
        """Drop the finished message and claim the next one, for the caller to publish; with
        `run_next` = (task_id, worker) the next turn is started too, for the caller to run
        now. `outcome` (replied, failed, stopped, ...) goes into the chat's history (''
        records nothing)."""
        k = self.keys(turn.chat_id)
        args = [turn.fence, turn.chat_id, outcome, self.options("complete"), *(run_next or ())]
        reply = self._scripts["complete"](keys=[*k.all, k.done], args=args)
        how = text_of(reply[0])
        if how == "claimed":
            return Completion("claimed", claimed_turn(turn.chat_id, reply[1], reply[2]))
        if how == "started":
            return Completion("started", claimed_turn(turn.chat_id, reply[1], reply[3]),
                              _started(reply[2:]))
        return Completion("idle" if how == "idle" else "stale")

    def holds(self, turn: TurnRef) -> bool:
        """True while this turn's fence is the chat's current one."""
        fence = self.redis.hget(self.keys(turn.chat_id).lease, "fence")
        return fence is not None and int(fence) == turn.fence

    def holds_many(self, turns: Sequence[TurnRef]) -> list[bool]:
        """`holds` for many turns in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for turn in turns:
                pipe.hget(self.keys(turn.chat_id).lease, "fence")
            fences = pipe.execute()
        return [f is not None and int(f) == t.fence for f, t in zip(fences, turns, strict=True)]

    def interrupted(self, turn: TurnRef) -> bool:
        """True when the turn was stopped by a new message (busy mode interrupt): its
        messages go into the chat's next turn."""
        fence, keep, why = self.redis.hmget(self.keys(turn.chat_id).stop,
                                            ["fence", "keep", "why"])
        return fence is not None and text_of(fence) == str(turn.fence) and \
            keep is not None and text_of(keep) == "1" and \
            (why is None or text_of(why) == "stopped")  # (not a withdrawn merged message)

    def asked_to_stop(self, turn: TurnRef) -> bool:
        """True when the turn was asked to stop (/stop, a Stop click, a withdraw, an
        interrupt), not merely cut from its lease (its re-run then goes on)."""
        fence = self.redis.hget(self.keys(turn.chat_id).stop, "fence")
        return fence is not None and text_of(fence) == str(turn.fence)

    def may_reply(self, turn: TurnRef) -> bool:
        """True while this turn holds the chat and was not asked to stop (one round trip)."""
        k = self.keys(turn.chat_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(k.lease, "fence")
            pipe.hget(k.stop, "fence")
            fence, stopped = pipe.execute()
        return fence is not None and int(fence) == turn.fence and (
            stopped is None or text_of(stopped) != str(turn.fence))
