"""The catch-up's two threads: its listener beats on while a catch-up reads, so a catch-up
that takes longer than FEISHU_CATCHUP_AFTER_S is no gap of its own (one outage, one
catch-up). Real Redis, the simulator's list API over real HTTP."""

from __future__ import annotations

import threading

import redis
from pydantic import SecretStr

from gateway.chats.active import ActiveChats
from gateway.feishu.outbound.openapi import OpenApi
from gateway.listener.catchup.catchup_book import CatchupBook, job_key, up_key
from gateway.listener.catchup.catchup_runner import CatchUpRunner, Limits
from gateway.listener.catchup.pages import ChatPages
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from tests.support.store import msg, store_for

AFTER_MS = 1000


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_beats_go_on_while_a_long_catch_up_reads(client: redis.Redis,
                                                 simulator: Simulator) -> None:
    app = simulator.app_id
    store_for(client, active_cap=10).inbox.ingest(msg("oc_long", 1), app_id=app)
    book = CatchupBook(client, "the-only-listener", after_ms=AFTER_MS, window_ms=3_600_000,
                       margin_ms=100, lease_ms=10_000)
    api = OpenApi(simulator.url, app, SecretStr(simulator.app_secret))
    stopping = threading.Event()
    runner = CatchUpRunner(
        book, ActiveChats(client), ChatPages(lambda _: api, None, page_size=5,
                                             stopping=stopping),
        lambda payload, app_id: "queued",
        Limits(3_600_000, 10, 5, beat_s=0.2), connected=lambda: [app],
        ready=lambda _: True, stopping=stopping)
    client.set(up_key(app), server_ms(client) - 5 * AFTER_MS)  # an outage of 5 s
    simulator.pause_listing()  # the list API holds its answer: a long catch-up
    runner.start()
    try:
        wait_until(lambda: simulator.requests_count("/open-apis/im/v1/messages") >= 1, 10,
                   "the catch-up's list call, held")
        held_at = server_ms(client)
        # longer than FEISHU_CATCHUP_AFTER_S, and the listener kept beating all along
        wait_until(lambda: server_ms(client) - held_at > 2 * AFTER_MS
                   and server_ms(client) - int(client.get(up_key(app)) or 0) < AFTER_MS,
                   10, "beats while the catch-up reads")
        simulator.resume_listing()
        wait_until(lambda: not client.exists(job_key(app)), 10, "the catch-up to end")
        beat = int(client.get(up_key(app)) or 0)
        wait_until(lambda: int(client.get(up_key(app)) or 0) > beat + 3 * 200, 10,
                   "three beats more")
        assert not client.exists(job_key(app)), "the catch-up's own length was a gap"
        assert len(simulator.list_calls) == 1, "one outage, one read"
    finally:
        simulator.resume_listing()
        stopping.set()
        runner.stop()
        api.close()
