"""Hundreds of queued `release_agent` tasks against chat turns (issue 9): one message at a
time, first on an idle worker, then while a backlog of releases waits in the low-priority
queue. Each release task is real (it hands its token back to an owner through Redis). What
is asserted is only the order: a turn does not wait behind the backlog (it is answered while
releases are still queued); the delay it does see is measured."""

from __future__ import annotations

import uuid
from typing import Any

from bench import raw
from bench.load import one_at_a_time, percentile
from bench.stack import Stack
from gateway.broker.names import RELEASE_AGENT, RELEASE_QUEUE
from gateway.ops.processes import wait_until

Figures = dict[str, Any]


def _queue_releases(count: int) -> None:
    for _ in range(count):
        raw.app.send_task(RELEASE_AGENT, queue=RELEASE_QUEUE,
                          kwargs={"owner": "bench:0:gone", "token": uuid.uuid4().hex[:12],
                                  "cause": "cap", "session": "oc_bench#0"})


def measure(st: Stack, backlog: int = 500, singles: int = 20) -> Figures:
    worker = st.worker(1)  # one worker slot: a turn could only wait behind the releases
    listener = st.listener()
    try:
        one_at_a_time(st.sim, "oc_rel_warm", 5)
        idle = one_at_a_time(st.sim, "oc_rel_idle", singles)
        _queue_releases(backlog)
        queued_at_start = st.client.llen(RELEASE_QUEUE)
        during, left = [], []
        for n in range(singles):
            during += one_at_a_time(st.sim, f"oc_rel_busy_{n}", 1)
            left.append(st.client.llen(RELEASE_QUEUE))
        wait_until(lambda: st.client.llen(RELEASE_QUEUE) == 0, 120, "the release backlog")
        assert left[0] > 0, "a turn waited behind the whole release backlog"
        return {"backlog": backlog, "queued_at_start": queued_at_start,
                "idle_p50_ms": percentile(idle, 50), "idle_p99_ms": percentile(idle, 99),
                "backlog_p50_ms": percentile(during, 50), "backlog_p99_ms": percentile(during, 99),
                "releases_left_after_first_turn": left[0],
                "turns_answered_while_releases_queued": sum(1 for n in left if n > 0)}
    finally:
        listener.stop()
        worker.stop()
        st.wait_connections(0)
