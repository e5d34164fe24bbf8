"""An app's catch-up in Redis: the beats of its connected listeners (what a gap is measured
from, on Redis's clock), the job a gap plans, its lease and its progress (lua/: beat.lua,
take.lua, step.lua). Every key of one app carries the app's hash tag: each script touches
one slot of a Redis Cluster.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.chats.active import ActiveChat
from gateway.core.scripts import register


def prefix(app_id: str) -> str:
    return f"gw:catchup:{{{app_id}}}"


def up_key(app_id: str) -> str:
    """String: the server ms of the app's last beat (any listener connected to it)."""
    return f"{prefix(app_id)}:up"


def upf_key(app_id: str) -> str:
    """String: Feishu's clock (ms) at the app's last beat, as its listener read it from
    Feishu's answers (none after a beat that did not know it)."""
    return f"{prefix(app_id)}:upf"


def job_key(app_id: str) -> str:
    """Hash: the app's pending catch-up and its progress (lua/take.lua)."""
    return f"{prefix(app_id)}:job"


def lease_key(app_id: str) -> str:
    """String: the listener working the app's catch-up, with a TTL."""
    return f"{prefix(app_id)}:lease"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class Job:
    """A catch-up taken: read back what was sent in [since_ms, until_ms] (Redis's clock) in
    `chats` (None until planned), from chat number `next`, its page `token`, `pages` of it
    read so far."""

    gen: int
    since_ms: int
    until_ms: int
    chats: tuple[ActiveChat, ...] | None
    next: int
    token: str
    pages: int
    clock: str = "redis"
    """What since/until are on: "feishu" (the messages' own clock) or "redis"."""
    planned_ms: int = 0
    """Redis's clock when the gap was found."""


def encode_chats(chats: Sequence[ActiveChat]) -> str:
    return json.dumps([[c.chat_id, c.chat_type, c.app_id, c.at_ms] for c in chats],
                      separators=(",", ":"))


def decode_chats(raw: str) -> tuple[ActiveChat, ...] | None:
    """The planned chats ('' or unreadable: None, to be planned again)."""
    try:
        rows = json.loads(raw) if raw else None
        return None if rows is None else tuple(
            ActiveChat(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows)
    except (ValueError, TypeError, IndexError):
        return None


def job_of(reply: Sequence[Any]) -> Job | None:
    """take.lua's answer as a Job (None: no job, or another listener holds it)."""
    if not reply or _text(reply[0]) != "job":
        return None
    gen, since, until, chats, nxt, token, pages = (_text(v) for v in reply[1:8])
    clock, planned = (_text(v) for v in reply[8:10]) if len(reply) >= 10 else ("redis", "0")
    return Job(int(gen), int(since), int(until), decode_chats(chats), int(nxt), token,
               int(pages), clock, int(planned))


class CatchupBook:
    def __init__(self, client: Any, owner: str, *, after_ms: int, window_ms: int,
                 margin_ms: int, lease_ms: int) -> None:
        self.redis, self.owner = client, owner
        self.after_ms, self.window_ms = after_ms, window_ms
        self.margin_ms, self.lease_ms = margin_ms, lease_ms
        self._scripts = register(client, "gateway.listener.catchup")

    def beat(self, app_id: str, feishu_ms: int | None = None) -> tuple[bool, int | None]:
        """This listener is connected to `app_id` (`feishu_ms`: Feishu's clock now, as its
        answers said; None unknown): (a job is pending, the gap just found in ms, or None;
        -1 when no earlier beat was known: nothing was planned)."""
        pending, gap = self._scripts["beat"](
            keys=[up_key(app_id), job_key(app_id), upf_key(app_id)],
            args=[self.after_ms, self.window_ms, self.margin_ms,
                  "" if feishu_ms is None else feishu_ms])
        found = _text(gap)
        return _text(pending) == "1", int(found) if found else None

    def take(self, app_id: str) -> Job | None:
        """The app's job with its lease, unless none waits or another listener holds it."""
        return job_of(self._scripts["take"](keys=[lease_key(app_id), job_key(app_id)],
                                            args=[self.owner, self.lease_ms]))

    def _step(self, app_id: str, job: Job, action: str, *fields: Any) -> bool:
        return bool(self._scripts["step"](keys=[lease_key(app_id), job_key(app_id)],
                                          args=[self.owner, self.lease_ms, job.gen, action,
                                                *fields]))

    def save(self, app_id: str, job: Job, **fields: Any) -> bool:
        """Record progress and extend the lease (no fields: extend it only); False when the
        lease or the job is no longer ours."""
        pairs = [x for name, value in fields.items() for x in (name, value)]
        return self._step(app_id, job, "save", *pairs)

    def done(self, app_id: str, job: Job) -> bool:
        return self._step(app_id, job, "done")

    def release(self, app_id: str, job: Job) -> bool:
        return self._step(app_id, job, "release")
