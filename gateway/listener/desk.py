"""The listener's control desk: commands, notices and `stopping` jobs (a running turn whose
message was withdrawn, or whose chat the bot left) from the control-job stream.

Cancelling waits up to GATEWAY_CANCEL_TIMEOUT for a running turn to end, so it runs here, in
the listener: never on the SDK loop, never in a Celery worker slot (which a busy pool may not
have), and replies go out directly, so the user hears back even when every worker is busy.
No thread sits in that wait: a stop whose turn is still running is parked, one watcher
thread checks every parked turn in one round trip each poll, and the few serving threads
only do the short steps (the cancel script, the fencing, the reply). So 50 stops at once of
turns that ignore the flag all end within the cancel timeout, not 50 / threads times it.
Jobs are durable (Redis stream): a job a dead listener left half done is taken up by another
desk and finished exactly once (the cancel step is recorded under the command's id).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from functools import partial

import redis

from gateway.approvals.verdicts import Verdicts
from gateway.broker.publisher import BROKER_ERRORS
from gateway.chats.cancel import Canceller, Stopping
from gateway.chats.jobs import ControlJob, ControlJobs
from gateway.chats.store import ChatStore
from gateway.core.errors import GatewayError, RetryableError
from gateway.core.loops import describe
from gateway.core.model import Message
from gateway.feishu.outbound.delivery import Abandoned, Replies, reply_uuid
from gateway.listener.feedback import ReactionDesk
from gateway.listener.menu import MenuDesk

logger = logging.getLogger(__name__)

DONE_EMOJI = "DONE"
"""The reaction that confirms a command whose outcome its card shows already (/stop of an
answer with a card, /approve)."""
CONFIRMED_TTL_MS = 300_000
"""A command answered with a reaction is remembered this long (as a stop's own record)."""
PRUNE_EVERY_S = 600.0


REFUSED_NOTICE = ("Sorry, this bot does not take direct messages from you. Ask an "
                  "admin of this bot if you think you should have access.")
LATE_NOTICE = ("This message arrived late (the connection to Feishu was down for a while), "
               "so it was not answered, nor were any others of this chat sent then. Please "
               "send again what still matters.")


def full_inbox_notice(waiting: int) -> str:
    return (f"This message was not queued: {waiting} messages of this chat are already "
            "waiting. Please send it again once the bot has caught up.")


class ControlDesk:
    def __init__(self, jobs: ControlJobs, canceller: Canceller, replies: Replies,
                 store: ChatStore, *, verdicts: Verdicts | None = None,
                 reactions: ReactionDesk | None = None, menu: MenuDesk | None = None,
                 threads: int = 4,
                 block_ms: int = 500, touch_every_s: float = 2.0) -> None:
        self._verdicts = verdicts
        self._reactions = reactions
        self._menu = menu
        self._jobs = jobs
        self._canceller = canceller
        self._replies = replies
        self._store = store
        self.threads = threads
        self.block_ms = block_ms
        self.touch_every_s = touch_every_s
        self._queue: queue.SimpleQueue[tuple[ControlJob, Callable[[], bool]]] = \
            queue.SimpleQueue()
        self._in_flight: set[str] = set()
        self._parked: dict[str, tuple[ControlJob, Stopping]] = {}
        self._idle = threading.Condition()
        self._guard = threading.Lock()
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._run, name="gateway-control-reader",
                                          daemon=True)] + [
            threading.Thread(target=self._serve, name=f"gateway-control-{n}", daemon=True)
            for n in range(threads)] + [
            threading.Thread(target=self._watch, name="gateway-control-waits", daemon=True)]

    def start(self) -> ControlDesk:
        self._jobs.ensure_group()
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout_s: float = 3.0) -> None:
        """Take no new job; give the ones in hand `timeout_s` to finish. What is left stays
        pending in Redis and another listener's desk finishes it (after 10 s)."""
        self._stopping.set()
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._in_flight and time.monotonic() < deadline:
                self._idle.wait(deadline - time.monotonic())
        if self._in_flight:
            logger.warning("control desk stopped with %d job(s) in hand; another listener "
                           "will finish them", len(self._in_flight))

    def _run(self) -> None:
        clock = {"touch": 0.0, "prune": 0.0}
        while not self._stopping.is_set():
            self._round("round", lambda: self._read_round(clock))

    def _round(self, what: str, step: Callable[[], object]) -> None:
        """One round of a desk thread: any failure is one line and a pause, never its end."""
        try:
            step()
        except redis.RedisError as error:
            logger.warning("control desk: redis unavailable: %s", error)
            self._stopping.wait(1.0)
        except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
            logger.error("control desk: %s failed, going on: %s", what, describe(error))
            self._stopping.wait(1.0)

    def _read_round(self, clock: dict[str, float]) -> None:
        """Take new jobs; every few seconds touch the ones in hand, adopt orphans, prune."""
        self._take(self._free())
        if time.monotonic() - clock["touch"] >= self.touch_every_s:
            clock["touch"] = time.monotonic()
            with self._guard:
                in_hand = list(self._in_flight)
            self._jobs.touch(in_hand)
            for job in self._jobs.orphans(max(self._free(), 1)):
                self._submit(job)
            if time.monotonic() - clock["prune"] >= PRUNE_EVERY_S:
                clock["prune"] = time.monotonic()
                self._jobs.prune()

    def _free(self) -> int:
        """Serving threads not busy (parked stops take none)."""
        with self._guard:
            return self.threads - (len(self._in_flight) - len(self._parked))

    def _take(self, free: int) -> None:
        if free <= 0:
            self._stopping.wait(0.05)
            return
        for job in self._jobs.read(free, self.block_ms):
            self._submit(job)

    def _submit(self, job: ControlJob) -> None:
        with self._guard:
            if job.job_id in self._in_flight:
                return
            self._in_flight.add(job.job_id)
        self._queue.put((job, lambda: self._perform(job)))

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                job, step = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._handle(job, step)
            except Exception as error:  # noqa: BLE001 (a thread's boundary: it must go on)
                logger.error("control job %s: %s", job.job_id, describe(error))

    def _watch(self) -> None:
        while not self._stopping.wait(self._canceller.poll_s):
            self._round("watch", self._watch_round)

    def _watch_round(self) -> None:
        """Which parked stops' turns ended (one round trip for all), or ran out of time;
        each is handed to a serving thread to be finished."""
        with self._guard:
            parked = list(self._parked.items())
        if not parked:
            return
        holding = self._store.turns.holds_many([w.turn for _, (_, w) in parked])
        now = time.monotonic()
        for (job_id, (job, waiting)), holds in zip(parked, holding, strict=True):
            if holds and now < waiting.deadline:
                continue
            with self._guard:
                self._parked.pop(job_id, None)
            self._queue.put((job, partial(self._finish, job, waiting, not holds)))

    def _handle(self, job: ControlJob, step: Callable[[], bool]) -> None:
        """Run one step of a job; a job that is finished is acknowledged, a parked one stays
        in hand (touched, so no other desk takes it) until its turn ends."""
        parked = False
        try:
            parked = not step()
            if not parked:
                self._jobs.done(job.job_id)
        except Abandoned:
            logger.info("control job %s (%s in chat %s) left for another listener",
                        job.job_id, job.kind, job.chat_id)
        except redis.RedisError as error:  # left pending: taken up again once Redis is back
            logger.warning("control job %s (%s in chat %s) postponed: redis unavailable: %s",
                           job.job_id, job.kind, job.chat_id, error)
        except (RetryableError, *BROKER_ERRORS) as error:  # (a reaction's, a menu click's)
            logger.warning("control job %s (%s) postponed: %s", job.job_id, job.kind, error)
        except Exception:  # the control thread's boundary: log, drop the job, go on
            logger.exception("control job %s (%s in chat %s) failed", job.job_id, job.kind,
                             job.chat_id)
            if job.message is not None and job.kind == "command":
                self._say(job.message, "Sorry, that command failed; please try again.",
                          "command")
            self._jobs.done(job.job_id)
        finally:
            if not parked:
                with self._guard:
                    self._in_flight.discard(job.job_id)
                with self._idle:
                    self._idle.notify_all()

    def _perform(self, job: ControlJob) -> bool:
        """A job's first step; False when it was parked (a running turn is stopping)."""
        if job.kind == "stopping":  # nobody to tell: the sender withdrew it, or the bot left
            return self._park(job, self._canceller.watch(
                job.chat_id, int(job.target), job.task, job.why or "stopped"))
        if job.kind == "click-stop":  # a card's Stop button: as /stop; the card tells who
            # (bound to its turn's fence: no debounce, which would drop a click that came
            # just after another turn's /stop)
            begun = self._canceller.begin(job.chat_id, f"click:{job.task}", target=job.target,
                                          debounce=False, sent_ms=job.sent_ms)
            return True if not isinstance(begun, Stopping) else self._park(job, begun)
        if job.kind == "reaction":  # (a failed read or hook task: postponed, taken again)
            if self._reactions is not None:
                self._reactions.perform(job)
            return True
        if job.kind == "menu":  # (a failed echo or intake step: postponed, taken again)
            if self._menu is not None:
                self._menu.perform(job)
            return True
        message = job.message
        if message is None:
            logger.error("control job %s dropped: its message cannot be read", job.job_id)
            return True
        if job.kind == "command" and job.command in ("approve", "deny"):
            if self._verdicts is None:
                logger.error("/%s in chat %s dropped: approvals are off", job.command,
                             job.chat_id)
                return True
            decision = "once" if job.command == "approve" else "deny"
            self._confirm(message, self._verdicts.by_text(message, decision), job.command)
        elif job.kind == "command":
            begun = self._canceller.begin(job.chat_id, message.message_id,
                                          new_session=job.command == "new", target=job.target,
                                          renewed=job.renewed,
                                          sent_ms=message.create_time_ms)
            if isinstance(begun, Stopping):
                return self._park(job, begun)
            self._say(message, begun.user_reply(), "command")
        elif job.kind == "interrupt":  # busy mode interrupt: stop the turn, say nothing
            begun = self._canceller.begin(job.chat_id, f"interrupt:{message.message_id}",
                                          target=job.target, debounce=False,
                                          interrupt=message.message_id)
            if isinstance(begun, Stopping):
                with self._guard:
                    self._parked[job.job_id] = (job, begun)
                return False
        elif job.kind == "inbox-full":
            self._say(message, full_inbox_notice(job.waiting), "inbox-full")
        elif job.kind == "late":
            self._say(message, LATE_NOTICE, "late")
        elif job.kind == "refused":
            self._say(message, REFUSED_NOTICE, "refused")
        else:
            logger.error("control job %s dropped: unknown kind %r", job.job_id, job.kind)
        return True

    def _park(self, job: ControlJob, waiting: Stopping) -> bool:
        """Hand the stopping turn to the watcher thread; False: the job is parked."""
        with self._guard:
            self._parked[job.job_id] = (job, waiting)
        return False

    def _finish(self, job: ControlJob, waiting: Stopping, ended: bool) -> bool:
        """A parked stop's last step: end the turn (fence it, if it did not end), reply to
        a command."""
        shown = job.kind == "command" and self._store.clicks.stop_shown(waiting.turn.chat_id,
                                                                 waiting.turn.fence)
        result = self._canceller.end(waiting, ended=ended)  # (a live card is closed after)
        if job.message is not None and job.kind == "command":
            self._confirm(job.message, result.user_reply(shown=shown), "command")
        return True

    def _confirm(self, message: Message, text: str, purpose: str) -> None:
        """Answer a command with `text`; with none (what it did shows on a card already),
        a reaction on it, so nothing is said twice. A command answered with a reaction
        before (its job runs again: its listener died) is answered no more."""
        key = self._store.keys(self._store.keyspace.scope.of_message(message)).confirmed(
            message.message_id)
        if self._store.redis.exists(key):
            return
        if text:
            self._say(message, text, purpose)
            return
        self._store.redis.set(key, "1", px=CONFIRMED_TTL_MS)
        try:
            self._replies.call(f"confirmation on {message.message_id}",
                               lambda api: api.add_reaction(message.message_id, DONE_EMOJI),
                               app_id=message.app_id, chat_id=message.chat_id,
                               may_send=lambda: not self._stopping.is_set(),
                               stopped=self._stopping)
        except Abandoned:
            raise
        except GatewayError as error:  # (the card says it: nothing is lost)
            logger.warning("%s confirmation on %s in chat %s given up: %s", purpose,
                           message.message_id, message.chat_id, error)

    def _say(self, message: Message, text: str, purpose: str) -> None:
        """Send the desk's reply; a stopping desk abandons it (Abandoned: the job stays)."""
        try:
            self._replies.send_text(message.message_id, text, app_id=message.app_id,
                                    chat_id=message.chat_id,
                                    in_thread=bool(message.thread_id),
                                    uuid=reply_uuid(message.reply_key, purpose),
                                    may_send=lambda: not self._stopping.is_set(),
                                    stopped=self._stopping)
        except Abandoned:
            raise
        except GatewayError as error:
            logger.error("%s reply to %s in chat %s given up: %s", purpose, message.message_id,
                         message.chat_id, error)
            self._store.record_undelivered(self._store.keyspace.scope.of_message(message),
                                           message.message_id, purpose, str(error))
