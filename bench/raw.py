"""Raw Celery for comparison: a no-op task under the product's own Celery settings.

The task's only work is one RPUSH of (sent, done) times, so the bench sees it finish.
`celery -A bench.raw worker` runs it (the broker is REDIS_URL, as for the gateway).
"""

from __future__ import annotations

import time
from functools import cache

import redis
from celery import Celery

import celeryconfig

DONE_KEY = "bench:raw:done"
NOOP = "bench.noop"

app = Celery("bench_raw")
app.config_from_object(celeryconfig)


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(app.conf.broker_url)


@app.task(name=NOOP)
def noop(sent_at: float) -> None:
    _client().rpush(DONE_KEY, f"{sent_at!r} {time.time()!r}")
