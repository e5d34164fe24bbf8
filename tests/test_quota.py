"""The send quota shared through Redis: buckets, priorities, holds. Real Redis."""

from __future__ import annotations

import threading
import time

import redis

from gateway.feishu.quota import Quota, Rates, app_key


def drawn_within(quota: Quota, seconds: float, **kwargs: object) -> int:
    """How many sends got a token within `seconds`, drawing as fast as allowed."""
    deadline, count = time.monotonic() + seconds, 0
    while quota.acquire("cli_a", timeout_s=max(deadline - time.monotonic(), 0.0),
                        **kwargs):  # type: ignore[arg-type]
        count += 1
    return count


def test_no_second_sees_more_sends_than_the_limit(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=20, per_min=10_000, chat_per_s=1000))
    redis_client.delete(app_key("cli_a"))
    count = drawn_within(quota, 1.0)
    assert 18 <= count <= 20  # a burst of 4, then 16 more over the second
    assert 14 <= drawn_within(quota, 1.0) <= 17  # steady: 80% of the limit


def test_the_per_minute_bucket_caps_a_long_burst(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=60, chat_per_s=1000))
    redis_client.delete(app_key("cli_a"))
    assert drawn_within(quota, 0.5) in (12, 13)  # its burst, and 0.4 a second


def test_one_chat_gets_its_own_smaller_share(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=10))
    redis_client.delete(app_key("cli_a"), "gw:quota:chat:oc_busy", "gw:quota:chat:oc_other")
    busy = sum(quota.acquire("cli_a", "oc_busy", timeout_s=0) for _ in range(20))
    other = sum(quota.acquire("cli_a", "oc_other", timeout_s=0) for _ in range(3))
    assert (busy, other) == (2, 2)  # each chat's burst is its own


def test_low_priority_leaves_a_reserve_for_replies(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=50, per_min=100_000, chat_per_s=1000))
    redis_client.delete(app_key("cli_a"))
    low = sum(quota.acquire("cli_a", low=True, timeout_s=0) for _ in range(20))
    high = sum(quota.acquire("cli_a", timeout_s=0) for _ in range(20))
    assert (low, high) == (8, 2)  # a burst of 10, two kept for replies


def test_a_hold_stops_every_draw_until_it_ends(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=1000))
    other = Quota(redis_client, quota.rates)  # another worker process
    redis_client.delete(app_key("cli_a"))
    quota.hold("cli_a", 0.6)
    assert not other.acquire("cli_a", timeout_s=0.3)
    clock = time.monotonic()
    assert other.acquire("cli_a", timeout_s=2)
    assert 0.2 <= time.monotonic() - clock <= 1.0


def test_a_stopped_turn_stops_waiting(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=1000))
    redis_client.delete(app_key("cli_a"))
    quota.hold("cli_a", 30)
    stopped = threading.Event()
    threading.Timer(0.2, stopped.set).start()
    clock = time.monotonic()
    assert not quota.acquire("cli_a", stopped=stopped, timeout_s=30)
    assert time.monotonic() - clock < 2


def test_without_redis_the_send_goes_ahead() -> None:
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)
    assert Quota(dead).acquire("cli_a", "oc_x", timeout_s=1)


def test_a_bucket_too_small_for_a_reserve_still_serves_low_priority(
        redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=5))
    redis_client.delete(app_key("cli_a"), "gw:quota:chat:oc_tiny")
    assert quota.acquire("cli_a", "oc_tiny", low=True, timeout_s=1)  # capacity 1
    assert quota.acquire("cli_a", "oc_tiny", low=True, timeout_s=1)  # after a refill
