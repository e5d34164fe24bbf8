"""The control-job stream: commands (/stop, /new) and notices, durable until done.

The ingest script adds a job in the same step that marks its message seen, so a listener
that dies right after leaves the job behind; any listener's control desk takes it up: new
jobs through the consumer group, orphaned ones (their desk stopped touching them) through
XAUTOCLAIM after `orphan_after_ms`. A job is deleted once done.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from gateway.state.keys import CONTROL_KEY
from gateway.types import Message

logger = logging.getLogger(__name__)

GROUP = "gw-desks"


@dataclass(frozen=True, slots=True)
class ControlJob:
    job_id: str
    kind: str
    """`command` or `inbox-full`."""
    chat_id: str
    message: Message | None
    command: str = ""
    waiting: int = 0
    target: str = "*"
    """The fence that held the chat when the command arrived ('' none; '*' unknown: a job
    written before commands carried it)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def parse_job(job_id: Any, raw: Any) -> ControlJob:
    """A stream entry → ControlJob, tolerantly (unknown fields ignored)."""
    fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
    try:
        message: Message | None = Message.from_json(fields.get("message", ""))
    except (ValueError, TypeError):
        message = None
    try:
        waiting = int(fields.get("waiting", "0"))
    except ValueError:
        waiting = 0
    return ControlJob(_text(job_id), fields.get("kind", ""), fields.get("chat", ""), message,
                      fields.get("command", ""), waiting, fields.get("fence", "*"))


class ControlJobs:
    def __init__(self, client: redis.Redis, consumer: str, *, orphan_after_ms: int) -> None:
        """`client` must allow blocking reads (socket timeout above `block_ms`)."""
        self._redis = client
        self.consumer = consumer
        self.orphan_after_ms = orphan_after_ms

    def ensure_group(self) -> None:
        try:
            self._redis.xgroup_create(CONTROL_KEY, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise

    def read(self, count: int, block_ms: int) -> list[ControlJob]:
        """New jobs for this desk, waiting up to `block_ms` for one."""
        try:
            reply = self._redis.xreadgroup(GROUP, self.consumer, {CONTROL_KEY: ">"},
                                           count=count, block=block_ms)
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            self.ensure_group()  # Redis lost the stream (a restart without persistence)
            return []
        streams: list[Any] = list(reply or [])
        return [parse_job(entry[0], entry[1]) for _, entries in streams for entry in entries]

    def orphans(self, count: int) -> list[ControlJob]:
        """Jobs another desk took and stopped working on (it died): now this desk's."""
        reply = self._redis.xautoclaim(CONTROL_KEY, GROUP, self.consumer, self.orphan_after_ms,
                                       "0-0", count=count)
        entries: list[Any] = list(reply[1]) if len(reply) > 1 else []
        return [parse_job(entry[0], entry[1]) for entry in entries if entry[1] is not None]

    def touch(self, job_ids: Iterable[str]) -> None:
        """Mark jobs as still being worked on (their idle time starts again)."""
        ids: list[Any] = list(job_ids)
        if ids:
            self._redis.xclaim(CONTROL_KEY, GROUP, self.consumer, 0, ids, justid=True)

    def prune(self, idle_ms: int = 3_600_000) -> int:
        """Forget desks gone for an hour with nothing pending (each listener start adds one)."""
        gone = 0
        for consumer in self._redis.xinfo_consumers(CONTROL_KEY, GROUP):
            name = _text(consumer.get("name", ""))
            if name != self.consumer and int(consumer.get("pending", 0)) == 0 and int(
                    consumer.get("idle", 0)) >= idle_ms:
                self._redis.xgroup_delconsumer(CONTROL_KEY, GROUP, name)
                gone += 1
        return gone

    def done(self, job_id: str) -> None:
        with self._redis.pipeline() as pipe:
            pipe.xack(CONTROL_KEY, GROUP, job_id)
            pipe.xdel(CONTROL_KEY, job_id)
            pipe.execute()
