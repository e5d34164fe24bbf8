"""The control-job stream: commands (/stop, /new), notices and stops of withdrawn turns,
durable until done.

The ingest script adds a job in the same step that marks its message seen, so a listener
that dies right after leaves the job behind; any listener's control desk takes it up: new
jobs through the consumer group, orphaned ones (their desk stopped touching them) through
XAUTOCLAIM after `orphan_after_ms`. A job is deleted once done.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from gateway.chats.keys import CONTROL_KEY
from gateway.chats.routing import route
from gateway.chats.store_types import text_of
from gateway.core.model import Message

logger = logging.getLogger(__name__)

GROUP = "gw-desks"


@dataclass(frozen=True, slots=True)
class ControlJob:
    job_id: str
    kind: str
    """`command`, `interrupt` (busy mode interrupt: stop the turn of `target`),
    `inbox-full`, `late`, `refused`, `stopping` (a running turn whose message was
    withdrawn, or whose chat the bot left, was flagged: end it), `click-stop` (a
    streaming card's Stop button: stop the turn of `target` as /stop does; `task` is the
    click's token, `why` who clicked), `reaction` (a person reacted to message `task`
    of app `app`, as a bot's answer: emoji `why`, `command` added or removed, `target` who,
    `sent_ms` when) or `menu` (person `target` clicked a bot menu item of app `app` that
    stands for text `why`; `task` the event's id, `sent_ms` when)."""
    chat_id: str
    message: Message | None
    command: str = ""
    waiting: int = 0
    target: str = "*"
    """The fence that held the chat when the command arrived ('' none; '*' unknown: a job
    written before commands carried it)."""
    renewed: bool = False
    """A /new whose session was renewed by the step that admitted it (older jobs: not)."""
    task: str = ""
    """A `stopping` job's turn: the task running it."""
    why: str = ""
    """A `stopping` job's reason: `withdrawn` (its sender recalled the message) or `removed`
    (the bot left the chat)."""
    app: str = ""
    """A `reaction`'s app (the one its event came to)."""
    sent_ms: int = 0
    """When a `click-stop` was made (Feishu's clock; 0 unknown): a turn not started drops
    what was sent up to it, as a /stop does up to its create_time."""


def parse_job(job_id: Any, raw: Any) -> ControlJob:
    """A stream entry → ControlJob, tolerantly (unknown fields ignored)."""
    fields = {text_of(k): text_of(v) for k, v in (raw or {}).items()}
    try:
        message: Message | None = Message.from_json(fields.get("message", ""))
    except (ValueError, TypeError):
        message = None
    return ControlJob(text_of(job_id), fields.get("kind", ""), fields.get("chat", ""), message,
                      fields.get("command", ""), _number(fields.get("waiting")),
                      fields.get("fence", "*"), fields.get("renewed") == "1",
                      fields.get("task", ""), fields.get("why", ""),
                      fields.get("app", ""), _number(fields.get("sent_ms")))


def _number(field: str | None) -> int:
    """A job's whole-number field, 0 when absent or not a number (tolerantly)."""
    try:
        return int(field or "0")
    except ValueError:
        return 0


class ControlJobs:
    """The desk's side of the control streams: one on one Redis, one per shard on a Redis
    Cluster (see keys.Keyspace). With several streams a job's id names its stream
    (`<n>/<entry id>`) and new jobs are polled every `poll_ms` instead of a blocking read
    (a blocking read waits on one slot)."""

    def __init__(self, client: redis.Redis, consumer: str, *, orphan_after_ms: int,
                 streams: Sequence[str] = (CONTROL_KEY,), poll_ms: int = 50) -> None:
        """`client` must allow blocking reads (socket timeout above `block_ms`)."""
        self._redis = client
        self.consumer = consumer
        self.orphan_after_ms = orphan_after_ms
        self.streams = list(streams)
        self.poll_ms = poll_ms

    def _job_id(self, n: int, entry_id: Any) -> str:
        return text_of(entry_id) if len(self.streams) == 1 else f"{n}/{text_of(entry_id)}"

    def _where(self, job_id: str) -> tuple[str, str]:
        """A job id → (its stream, its entry id)."""
        if len(self.streams) == 1:
            return self.streams[0], job_id
        n, _, entry_id = job_id.partition("/")
        return self.streams[int(n)], entry_id

    def _each(self, command: Callable[[str], Sequence[Any]]) -> list[Any]:
        """The command `command(stream)` for every stream, in one round trip (one per node
        of a cluster); the replies (or errors) in order."""
        with self._redis.pipeline(transaction=False) as pipe:
            for stream in self.streams:
                pipe.execute_command(*command(stream), **route(self._redis, stream))  # type: ignore[no-untyped-call]
            return list(pipe.execute(raise_on_error=False))

    def ensure_group(self) -> None:
        for reply in self._each(lambda stream: (
                "XGROUP", "CREATE", stream, GROUP, "0", "MKSTREAM")):
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply

    def read(self, count: int, block_ms: int) -> list[ControlJob]:
        """New jobs for this desk, waiting up to `block_ms` for one."""
        if len(self.streams) > 1:
            return self._poll(count, block_ms)
        try:
            reply = self._redis.xreadgroup(GROUP, self.consumer, {self.streams[0]: ">"},
                                           count=count, block=block_ms)
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            self.ensure_group()  # Redis lost the stream (a restart without persistence)
            return []
        streams: list[Any] = list(reply or [])
        return [parse_job(entry[0], entry[1]) for _, entries in streams for entry in entries]

    def _poll(self, count: int, block_ms: int) -> list[ControlJob]:
        deadline = time.monotonic() + block_ms / 1000
        while True:
            replies = self._each(lambda stream: (
                "XREADGROUP", "GROUP", GROUP, self.consumer, "COUNT", count, "STREAMS",
                stream, ">"))
            jobs, lost = [], False
            for n, reply in enumerate(replies):
                if isinstance(reply, Exception):
                    if "NOGROUP" not in str(reply):
                        raise reply
                    lost = True
                    continue
                for _, entries in reply or []:
                    jobs += [parse_job(self._job_id(n, e[0]), e[1]) for e in entries]
            if lost:
                self.ensure_group()
            if jobs or time.monotonic() >= deadline:
                return jobs
            time.sleep(self.poll_ms / 1000)  # polling a cluster's streams, not synchronising

    def orphans(self, count: int) -> list[ControlJob]:
        """Jobs another desk took and stopped working on (it died): now this desk's."""
        jobs = []
        replies = self._each(lambda stream: (
            "XAUTOCLAIM", stream, GROUP, self.consumer, self.orphan_after_ms, "0-0",
            "COUNT", count))
        for n, reply in enumerate(replies):
            if isinstance(reply, Exception):
                raise reply
            entries: list[Any] = list(reply[1]) if len(reply) > 1 else []
            jobs += [parse_job(self._job_id(n, e[0]), e[1]) for e in entries if e[1] is not None]
        return jobs

    def touch(self, job_ids: Iterable[str]) -> None:
        """Mark jobs as still being worked on (their idle time starts again)."""
        by_stream: dict[str, list[Any]] = defaultdict(list)
        for job_id in job_ids:
            stream, entry_id = self._where(job_id)
            by_stream[stream].append(entry_id)
        for stream, ids in by_stream.items():
            self._redis.xclaim(stream, GROUP, self.consumer, 0, ids, justid=True)

    def prune(self, idle_ms: int = 3_600_000) -> int:
        """Forget desks gone for an hour with nothing pending (each listener start adds one)."""
        gone = 0
        for stream in self.streams:
            for consumer in self._redis.xinfo_consumers(stream, GROUP):
                name = text_of(consumer.get("name", ""))
                if name != self.consumer and int(consumer.get("pending", 0)) == 0 and int(
                        consumer.get("idle", 0)) >= idle_ms:
                    self._redis.xgroup_delconsumer(stream, GROUP, name)
                    gone += 1
        return gone

    def done(self, job_id: str) -> None:
        stream, entry_id = self._where(job_id)
        with self._redis.pipeline() as pipe:
            pipe.xack(stream, GROUP, entry_id)
            pipe.xdel(stream, entry_id)
            pipe.execute()
