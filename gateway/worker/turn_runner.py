"""One turn, start to end: fence check, heartbeat, agent, answer kept, reply (sent by
sending.py), hand-over.

This is the gateway's one broad `except` around agents: whatever an agent raises becomes an
honest failure reply for the user and a traceback for the operator, and the chat moves on.
The answer is stored (fenced) before its first piece is sent, so a re-run after a crash
resends the same pieces under the same uuids (Feishu shows them once) and never stitches a
second answer onto a first. A worker that shuts down while a reply waits to be retried
gives its turn back at once (`leave`): another worker resends the kept answer.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from gateway.agents.cache import AgentCache, conversation_of, session_key
from gateway.approvals.asking import Asker
from gateway.broker.publisher import Publisher
from gateway.chats.keys import turn_task_id
from gateway.chats.store import ChatStore
from gateway.chats.store_types import Answer, Completion, MergeWait, Started, TurnRef
from gateway.core import metrics
from gateway.core.logs import turn_context
from gateway.core.model import (
    GREETING,
    OUTBOUND,
    OUTBOUND_CARD,
    FormAnswer,
    FormField,
    Message,
    Reply,
    Turn,
    no_progress,
)
from gateway.feishu.outbound.delivery import Replies
from gateway.worker.handles import SHUTDOWN, TIME_LIMIT, ChatHandles, TurnHandle
from gateway.worker.heartbeat import Heartbeater
from gateway.worker.media_sender import MediaSender, Said, said
from gateway.worker.recent_reader import RecentReader
from gateway.worker.sending import FAILURE_REPLY, AnswerSender, gave_up_reply
from gateway.worker.streaming import Stream
from gateway.worker.turn_hooks import TurnHook, agent_running, shown

logger = logging.getLogger(__name__)

@dataclass
class TurnRunner:
    store: ChatStore
    locks: ChatHandles
    heartbeats: Heartbeater
    agents: AgentCache
    replies: Replies
    publisher: Publisher
    sender: AnswerSender
    """Sends each turn's answer, streamed or whole (gateway/worker/sending.py)."""
    asker: Asker
    """Opens approval requests and forms for `Turn.approve` and `Turn.ask`."""
    hooks: Sequence[TurnHook] = ()
    """The concerns around each turn's agent, in order (gateway/worker/turn_hooks.py)."""
    session_scope: str = "chat"
    """Whose conversation a turn continues: chat | user | thread (FEISHU_SESSION_SCOPE)."""
    drain_turns: int = 1
    """Turns one task may run for its chat (the first included) when more are waiting."""
    drain_budget_s: float = 0.0
    """No further turn starts in a task once it ran this long."""
    fetch_max_bytes: int = 20 * 1024 * 1024
    """`Turn.fetch` downloads attachments up to this size."""

    def leave(self) -> None:
        """The worker is shutting down: replies are no longer retried nor waited for (a
        wait now wakes at once); a turn whose piece then fails, or finds no room in the
        quota, stops and is handed back (`ChatStore.turns.hand_back`) for another worker to
        resend its kept answer. A send going well goes on. A turn whose agent still runs
        is stopped (`Turn.cancelled()` turns true: a cooperative agent ends at once) and
        handed back, its streamed answer showing that another worker takes it up; an
        agent that ignores it is waited for (a warm shutdown waits for it). No turn of the
        chat is started after the one running."""
        self.replies.leave()
        for handle in self.locks.running():
            if handle.answering:
                handle.stop(SHUTDOWN)

    def _agent_turn(self, message: Message, fence: int, handle: TurnHandle,
                    merged: tuple[Message, ...] = (), stream: Stream | None = None) -> Turn:
        """The agent's view; `merged`: every message it answers, `message` the last;
        its progress steps go to `stream` (none: nowhere)."""
        asker, api = self.asker, self.replies.api_for(message.app_id)
        merged = tuple(shown(self.hooks, m) for m in merged)
        message = merged[-1] if merged else shown(self.hooks, message)

        asks = itertools.count()  # the n-th question of the turn: the same on a run again

        stopped = handle.stopped

        def approve(prompt: str, timeout_s: float, key: str | None) -> str:
            decision = asker.ask(message, prompt, timeout_s, key, stopped, next(asks),
                                 handed_back=lambda: handle.reason == SHUTDOWN)
            cancelled()  # (a wait the stop cut short: what the agent makes of it is no answer)
            return decision

        def ask(title: str, fields: Sequence[FormField], timeout_s: float) -> FormAnswer:
            answer = asker.ask_form(message, title, fields, timeout_s, stopped, next(asks),
                                    handed_back=lambda: handle.reason == SHUTDOWN)
            cancelled()
            return answer

        def cancelled() -> bool:
            """`Turn.cancelled`: the agent that sees the stop answers in part."""
            if stopped.is_set():
                handle.seen = True
                return True
            return False

        def fetch(message_id: str, file_key: str, kind: str) -> bytes:
            return api.download(message_id, file_key, kind=kind, max_bytes=self.fetch_max_bytes)

        return Turn(message, fence, cancelled, approve, fetch, merged,
                    reporter=stream.progress if stream is not None else no_progress,
                    sender=MediaSender(self.replies).direct(message, stopped),
                    reader=RecentReader(self.replies, message), former=ask)

    def run(self, turn: TurnRef, *, task_id: str, worker: str) -> str:
        """Run `turn`, then the chat's next ones while they are already waiting (up to
        `drain_turns` turns and `drain_budget_s`; past that the next one is published and
        goes to the back of the queue, so one busy chat cannot hog a worker slot). Each turn
        is fenced and completed on its own, exactly as if it had its own task; ending one
        and starting the next is one script. Returns how the first turn ended (see
        `run_one`)."""
        started = self._start(turn, task_id, worker)
        if started is None:
            logger.info("turn %s of chat %s skipped: fence %d is stale",
                        turn.message_id, turn.chat_id, turn.fence)
            return "stale"
        if started.message_id != turn.message_id:  # an older message arrived late: it goes first
            logger.info("turn %s of chat %s runs the older message %s first (it arrived late)",
                        turn.message_id, turn.chat_id, started.message_id)
            turn = TurnRef(turn.chat_id, started.message_id, turn.fence)
        deadline = time.monotonic() + self.drain_budget_s
        done, first = 0, ""
        while True:
            done += 1
            go_on = done < self.drain_turns and time.monotonic() < deadline and \
                not self.replies.leaving.is_set()
            outcome, completion = self.run_one(turn, started,
                                               run_next=(task_id, worker) if go_on else None)
            first = first or outcome
            if completion is None or completion.following is None:
                return first
            if completion.started is None:
                self.publisher.publish(completion.following)
                return first
            turn, started = completion.following, completion.started

    def _start(self, turn: TurnRef, task_id: str, worker: str) -> Started | None:
        """Start the turn; merging (busy modes merge, interrupt), first wait as long as Redis
        says (the chat's newest message is younger than the merge window: more may join)."""
        while True:
            started = self.store.turns.start_or_wait(turn, task_id, worker)
            if not isinstance(started, MergeWait):
                return started
            time.sleep(min(started.ms, 10_000) / 1000)

    def run_one(self, turn: TurnRef, started: Started, *,
                run_next: tuple[str, str] | None = None) -> tuple[str, Completion | None]:
        """Run one started turn; returns how it ended (replied, resent, silent, failed,
        stopped, gave-up, unreadable, greeted, timed-out, handed-back) and what
        `ChatStore.turns.complete` gave: the chat's next turn (claimed, or started when `run_next`
        asked for it), or nothing."""
        clock = time.monotonic()
        following: Completion | None = None
        with turn_context(turn.chat_id, turn.message_id,
                          turn_task_id(turn.chat_id, turn.message_id, turn.fence), turn.fence), \
                self.locks.hold(turn) as handle:
            self.heartbeats.ensure_running()
            try:
                outcome = self._turn(turn, started, handle)
            except redis.RedisError as error:
                # not handed over: the lease runs out and the turn runs again (resending a
                # kept answer), so a Redis blip never drops a message
                logger.warning("turn %s of chat %s cut off by Redis (%s); it runs again once "
                               "its lease expired", turn.message_id, turn.chat_id, error)
                metrics.turn_ended("redis-cut", time.monotonic() - clock)
                raise
            except Exception:  # the task's boundary: a bug must not block the chat
                logger.exception("turn %s of chat %s failed; the chat goes on",
                                 turn.message_id, turn.chat_id)
                metrics.turn_ended("error", time.monotonic() - clock)
                failed = self.store.turns.complete(turn, outcome="failed")
                if failed.following is not None:
                    self.publisher.publish(failed.following)
                raise
            if handle.reason == TIME_LIMIT:
                # like Celery's hard time limit in prefork: the attempt counts, the lease
                # runs out, the turn runs again or is given up after GATEWAY_MAX_ATTEMPTS
                outcome = "timed-out"
            elif handle.reason == SHUTDOWN:
                outcome = "handed-back"
                self._hand_back(turn)
            else:  # a worker leaving starts no further turn (stale: a no-op)
                leaving = self.replies.leaving.is_set()
                following = self.store.turns.complete(turn, None if leaving else run_next,
                                                outcome=outcome)
        metrics.turn_ended(outcome, time.monotonic() - clock)
        metrics.merged(outcome, len(started.merged_ids))
        logger.info("turn %s of chat %s %s in %.2fs (attempt %d)",
                    turn_task_id(turn.chat_id, turn.message_id, turn.fence), turn.chat_id,
                    outcome, time.monotonic() - clock, started.attempt)
        return outcome, following

    def _turn(self, turn: TurnRef, started: Started, handle: TurnHandle) -> str:
        message, answer, merged = started.message, started.answer, started.merged
        if merged:  # several messages, one turn: the reply answers the last
            message = merged[-1]
            logger.info("turn %s of chat %s answers %d messages together: %s",
                        turn.message_id, turn.chat_id, len(started.merged_ids),
                        " ".join(started.merged_ids))
        session = session_key(conversation_of(
            turn.chat_id, self.session_scope, chat_type=message.chat_type,
            sender=message.sender_open_id, thread_id=message.thread_id)
            if message is not None else turn.chat_id, started.generation)
        missed = self._missed(turn.chat_id, session)
        if missed and (message is None or answer is not None or started.exhausted):
            self.agents.retire(session, "missed")  # not asked now, yet another process ran
        if message is None:
            logger.error("message %s of chat %s dropped: its stored entry cannot be read",
                         started.message_id, turn.chat_id)
            return "unreadable"
        outcome, stream = "resent", None
        if answer is None and message.message_type == GREETING:  # no agent: said as it is
            answer, outcome = Answer(GREETING, (message.text,)), "greeted"
        if answer is None and message.message_type in (OUTBOUND, OUTBOUND_CARD):
            answer, outcome = self.sender.outbound(message), "posted"  # (the bot's own)
        if answer is None:
            if started.exhausted:
                logger.error("message %s of chat %s given up after %d attempts that never "
                             "finished", message.message_id, message.chat_id,
                             started.attempt - 1)
                answer, outcome = Answer("gave-up", (gave_up_reply(started.attempt - 1),)), \
                    "gave-up"
            else:
                stream = self.sender.stream(turn, message, started.attempt, handle)
                agent_ended = agent_running(self.hooks, message)
                handle.answering = True
                try:
                    if self.replies.leaving.is_set():  # started as the worker was told
                        handle.stop(SHUTDOWN)
                    answer, outcome = self._ask(
                        lambda t: self._run_agent(session, t, missed, stream),
                        self._agent_turn(message, turn.fence, handle, merged, stream))
                finally:
                    handle.answering = False
                    agent_ended(outcome == "failed")
                if not handle.seen and not (stream is not None and stream.cut):
                    handle.resume()  # it answered whole, never seeing a shutdown's stop
                if stream is not None and (stream.live or self.sender.card_kept(
                        message, started.attempt)):
                    answer = self.sender.streamed(turn, stream, answer, outcome, handle)
            if answer is None:
                return "stopped" if handle.stopped.is_set() else outcome
            if handle.stopped.is_set() or not self.store.turns.keep_answer(turn, answer):
                if stream is not None:  # (a stop that came as the answer was kept)
                    self.sender.close_stopped(turn, stream)
                return "stopped"
        self.sender.send(turn, message, answer, handle, started.attempt, stream)
        return outcome

    def _hand_back(self, turn: TurnRef) -> None:
        """Give the turn back for another worker to send its kept answer, at once."""
        try:
            again = self.store.turns.hand_back(turn)
        except redis.RedisError as error:
            logger.warning("turn %s of chat %s not handed back (%s); it runs again once its "
                           "lease expired", turn.message_id, turn.chat_id, error)
            return
        if again is None:  # it lost its lease, or was stopped and nothing waits
            return
        try:
            published = self.publisher.publish(again)
        except redis.RedisError as error:
            published = False
            logger.warning("turn %s of chat %s handed back but not confirmed (%s)",
                           turn.message_id, turn.chat_id, error)
        if published:
            logger.info("turn %s of chat %s handed back: %s; another worker sends its reply",
                        turn.message_id, turn.chat_id, SHUTDOWN)
        else:  # its claim runs out and a sweeper publishes it
            logger.warning("turn %s of chat %s handed back but not published; it runs again "
                           "once its claim expired", turn.message_id, turn.chat_id)

    def _missed(self, chat_id: str, session: str) -> bool:
        """Whether another process started the session's previous turn, so an agent this
        process keeps for it missed that turn; marks this process as starting its turn now.
        Never for agents that keep nothing of a session in memory (no runner, no mark)."""
        runner = self.store.runner
        return bool(runner) and self.store.turns.mark_runner(chat_id, session) != runner

    def _run_agent(self, session: str, turn: Turn, missed: bool,
                   stream: Stream | None) -> Said | None:
        """The session's agent answers; it is held (never evicted) until its last piece.
        `missed`: the session's previous turn ran in another process (a cached agent missed
        it). Pieces are shown on `stream` as they come, when there is one; images and files
        among them are kept aside (gateway/worker/media_sender.py)."""
        with self.agents.hold(session, missed=missed) as agent:
            reply: Reply = agent.run(turn)
            return said(reply, None if stream is None else stream.consume)

    def _ask(self, run: Callable[[Turn], Said | None],
             turn: Turn) -> tuple[Answer | None, str]:
        try:
            reply = run(turn)
            text, media = reply or ("", ())
            pieces = MediaSender(self.replies).pieces(turn.message, media)  # (before it is kept)
        except Exception:  # the boundary: any agent (or factory) error is a failure reply
            logger.exception("agent failed on message %s of chat %s", turn.message_id,
                             turn.chat_id)
            return Answer("failure", (FAILURE_REPLY,)), "failed"
        if not text and not pieces:
            return None, "silent"
        return self.sender.answer(text, late=turn.caught_up, media=pieces), "replied"
