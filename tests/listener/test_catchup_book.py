"""The catch-up book's scripts against a real redis-server: a gap is measured from the last
beat of any listener, on Feishu's clock when the listeners know it, else on Redis's (a Redis
whose clock the test steps 2 minutes on, under libfaketime), the job it plans, the lease
one listener holds, and the progress a dead holder leaves to the next."""

from __future__ import annotations

import redis

from gateway.chats.active import ActiveChat
from gateway.listener.catchup.catchup_book import (
    CatchupBook,
    Job,
    encode_chats,
    job_key,
    lease_key,
    up_key,
    upf_key,
)
from gateway.ops.processes import wait_until
from tests.support.clocks import stepped_redis

AFTER_MS, WINDOW_MS, MARGIN_MS = 60_000, 6 * 3_600_000, 15_000


def book(client: redis.Redis, owner: str, lease_ms: int = 5000) -> CatchupBook:
    return CatchupBook(client, owner, after_ms=AFTER_MS, window_ms=WINDOW_MS,
                       margin_ms=MARGIN_MS, lease_ms=lease_ms)


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_two_minute_gap_on_redis_clock_plans_a_catch_up_of_it() -> None:
    with stepped_redis() as (clock, client):
        one, other = book(client, "listener-a"), book(client, "listener-b")
        app = "cli_gap"
        client.set(up_key(app), server_ms(client))  # the last beat before the outage
        last = int(client.get(up_key(app)) or 0)
        assert one.beat(app) == (False, None), "a beat right after: no gap"
        clock.step(30)
        assert other.beat(app) == (False, None), "30 s: shorter than FEISHU_CATCHUP_AFTER_S"
        beat_at = int(client.get(up_key(app)) or 0)
        clock.step(120)  # every listener of the app was gone for 2 minutes of Redis's clock
        pending, gap = other.beat(app)
        now = int(client.get(up_key(app)) or 0)
        assert pending and gap is not None and 120_000 <= gap < 125_000
        job = other.take(app)
        assert job is not None and job.chats is None and job.next == 0
        assert job.since_ms == beat_at - MARGIN_MS and job.until_ms == now + MARGIN_MS
        assert beat_at >= last + 30_000
        clock.step(-300)  # Redis's clock stepping back is no gap
        assert one.beat(app) == (True, None)


def test_no_beat_remembered_plans_nothing_and_a_new_gap_widens_a_pending_job(
        client: redis.Redis) -> None:
    """A first start, an upgrade or Redis's data lost: no gap is known, and the dedupe marks
    may be gone too, so nothing is read back (reading the window would answer again)."""
    listener = book(client, "listener-a")
    assert listener.beat("cli_first") == (False, -1)
    assert listener.take("cli_first") is None
    assert client.pttl(up_key("cli_first")) > WINDOW_MS, "the beat outlives the window"
    client.set(up_key("cli_first"), server_ms(client) - 2 * WINDOW_MS)  # a gap of 2 windows
    assert listener.beat("cli_first")[1] is not None
    job = listener.take("cli_first")
    assert job is not None
    now = server_ms(client)
    assert now - WINDOW_MS - 1000 <= job.since_ms <= now - WINDOW_MS + 10, "only the window"
    assert listener.save("cli_first", job, next=3, token="t")
    client.set(up_key("cli_first"), server_ms(client) - 2 * AFTER_MS)  # a second gap
    assert listener.beat("cli_first")[1] is not None
    again = listener.take("cli_first")
    assert again is not None and again.gen == job.gen + 1
    assert 0 <= again.since_ms - job.since_ms < 1000, "no further back than the window"
    assert again.until_ms >= job.until_ms and (again.next, again.token) == (0, "")
    assert not listener.save("cli_first", job, next=9), "the old job's progress no longer counts"
    assert client.pttl(job_key("cli_first")) > WINDOW_MS - 5000


def test_one_listener_holds_the_lease_and_a_dead_ones_progress_goes_on(
        client: redis.Redis) -> None:
    app = "cli_lease"
    first, second = book(client, "listener-a", lease_ms=300), book(client, "listener-b")
    client.set(up_key(app), server_ms(client) - 5 * AFTER_MS)
    assert first.beat(app)[0]
    job = first.take(app)
    assert job is not None and second.take(app) is None, "one holder at a time"
    chats = (ActiveChat("oc_1", "p2p", app, 1), ActiveChat("oc_2", "group", app, 2))
    assert first.save(app, job, chats=encode_chats(chats), next=1, token="page-2", pages=1)
    # the first listener dies: its lease runs out, the second goes on from its progress
    client.pexpire(lease_key(app), 1)
    taken = wait_until(lambda: second.take(app), 5, "the second listener to take the lease")
    assert isinstance(taken, Job) and taken.chats == chats
    assert (taken.next, taken.token, taken.pages) == (1, "page-2", 1)
    assert not first.save(app, job, next=2), "the dead holder's late write is refused"
    assert not first.done(app, job)
    assert second.done(app, taken)
    assert client.exists(job_key(app), lease_key(app)) == 0
    assert second.take(app) is None


def test_a_gap_on_feishus_clock_is_seen_whatever_redis_clock_does() -> None:
    """A listener that knows Feishu's clock (from its answers) measures the gap on it: a
    step of Redis's clock back during an outage hides no gap, a step forward makes none."""
    with stepped_redis() as (clock, client):
        listener, app, feishu = book(client, "listener-a"), "cli_feishu_gap", 1_800_000_000_000
        assert listener.beat(app, feishu) == (False, -1), "a first beat: no gap known"
        clock.step(-300)  # Redis's clock back 5 minutes while no listener ran for 2
        assert listener.beat(app, feishu + 120_000) == (True, 120_000)
        job = listener.take(app)
        assert job is not None and job.clock == "feishu"
        assert (job.since_ms, job.until_ms) == (feishu - MARGIN_MS, feishu + 120_000 + MARGIN_MS)
        clock.step(600)  # Redis's clock 5 minutes ahead: on Feishu's, a second went by
        assert listener.beat(app, feishu + 121_000) == (True, None)
        assert listener.beat(app) == (True, None), "Feishu's clock unknown: the job stands"
        assert client.get(upf_key(app)) is None, "the next gap is measured on Redis's clock"
