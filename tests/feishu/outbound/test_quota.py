"""The send quota shared through Redis: buckets, priorities, holds. Real Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from pydantic import SecretStr

from gateway.core.errors import RetryableError, Yielded
from gateway.feishu.outbound.delivery import Replies, RetryPolicy, reply_uuid
from gateway.feishu.outbound.openapi import OpenApi
from gateway.feishu.outbound.quota import Quota, Rates, app_key
from gateway.simulator import SendFaults, Simulator
from tests.support.clocks import SteppedClock, stepped_redis


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
    # 2 a second: a burst of 1 and a token every 0.625 s, far longer than the draws take
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=2))
    redis_client.delete(app_key("cli_a"), "gw:quota:chat:oc_busy", "gw:quota:chat:oc_other")
    busy = sum(quota.acquire("cli_a", "oc_busy", timeout_s=0) for _ in range(20))
    other = sum(quota.acquire("cli_a", "oc_other", timeout_s=0) for _ in range(3))
    assert (busy, other) == (1, 1)  # each chat's burst is its own


def test_low_priority_leaves_a_reserve_for_replies(redis_client: redis.Redis) -> None:
    # The per-minute bucket: a burst of 10 and a token every 1.5 s, far longer than the
    # draws take (the per-second one refills a token every 25 ms: a busy host's pause
    # between two draws would show as one more)
    quota = Quota(redis_client, Rates(per_s=1000, per_min=50, chat_per_s=1000))
    redis_client.delete(app_key("cli_a"))
    low = sum(quota.acquire("cli_a", low=True, timeout_s=0) for _ in range(20))
    high = sum(quota.acquire("cli_a", timeout_s=0) for _ in range(20))
    assert (low, high) == (8, 2)  # a burst of 10, two kept for replies


def pressed(quota: Quota, chat_id: str = "") -> None:
    """Drain the app's burst, then let a reply wait for a token (it marks the pressure)."""
    while quota.acquire("cli_a", chat_id, timeout_s=0):
        pass
    assert quota.acquire("cli_a", chat_id, timeout_s=2), "the reply never got its token"


def test_cosmetic_calls_yield_while_a_reply_waits_for_the_quota(
        redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=10, per_min=100_000, chat_per_s=1000))
    worker = Quota(redis_client, quota.rates)  # another worker process
    redis_client.delete(app_key("cli_a"))
    assert worker.acquire("cli_a", low=True, timeout_s=0), "no pressure yet: it takes"
    pressed(quota)
    with pytest.raises(Yielded):
        worker.acquire("cli_a", low=True, timeout_s=5)
    began = time.monotonic()
    assert worker.acquire("cli_a", low=True, patient=True, timeout_s=5)
    assert time.monotonic() - began >= 0.5, "a patient one waits out the pressure"
    assert worker.acquire("cli_a", low=True, timeout_s=2), "the pressure is over"


def test_a_yielding_call_gives_the_chats_token_back(redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=10, per_min=100_000, chat_per_s=1))
    redis_client.delete(app_key("cli_a"), "gw:quota:chat:oc_yield")
    pressed(quota)  # the app's quota, pressed by a reply of another chat
    with pytest.raises(Yielded):
        quota.acquire("cli_a", "oc_yield", low=True, timeout_s=1)
    assert quota.acquire("cli_a", "oc_yield", timeout_s=0.5), "the chat's token was wasted"


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


# Redis's clock stepping (NTP, a VM resumed, a failover to a replica whose clock is behind)


@pytest.fixture(scope="module")
def stepped() -> Iterator[tuple[SteppedClock, redis.Redis]]:
    """A Redis whose clock the test steps, and a client of it."""
    with stepped_redis() as found:
        yield found


@pytest.mark.parametrize("step_s", [-300, 300])
def test_a_drained_bucket_refills_in_its_own_period_after_a_clock_step(
        stepped: tuple[SteppedClock, redis.Redis], step_s: float) -> None:
    clock, client = stepped
    quota = Quota(client, Rates(per_s=1000, per_min=100_000, chat_per_s=2))
    client.delete(app_key("cli_a"), "gw:quota:chat:oc_step")
    assert quota.acquire("cli_a", "oc_step", timeout_s=0)  # the chat's burst of one
    assert not quota.acquire("cli_a", "oc_step", timeout_s=0)
    clock.step(step_s)
    began = time.monotonic()
    assert quota.acquire("cli_a", "oc_step", timeout_s=5), "the chat could not send again"
    assert time.monotonic() - began < 1.5, "waited longer than the bucket's period"


def test_a_hold_ends_within_its_own_length_after_a_clock_step_back(
        stepped: tuple[SteppedClock, redis.Redis]) -> None:
    clock, client = stepped
    quota = Quota(client, Rates(per_s=1000, per_min=100_000, chat_per_s=1000))
    client.delete(app_key("cli_a"))
    quota.hold("cli_a", 1.0)
    clock.step(-300)
    began = time.monotonic()
    assert quota.acquire("cli_a", timeout_s=5), "the hold lasted as long as the step"
    assert time.monotonic() - began < 1.5
    quota.hold("cli_a", 0.5)  # a new hold after the step is kept for its own length
    assert not quota.acquire("cli_a", timeout_s=0.2)
    assert quota.acquire("cli_a", timeout_s=2)


def test_a_pressure_ends_within_its_own_length_after_a_clock_step_back(
        stepped: tuple[SteppedClock, redis.Redis]) -> None:
    clock, client = stepped
    quota = Quota(client, Rates(per_s=10, per_min=100_000, chat_per_s=1000))
    client.delete(app_key("cli_a"))
    for step_s in (-300, -90):  # past the quota's TTL, and within it
        pressed(quota)
        clock.step(step_s)
        assert quota.acquire("cli_a", low=True, patient=True, timeout_s=5)
        assert quota.acquire("cli_a", low=True, timeout_s=5), "the pressure lasted the step"


def test_a_reply_whose_budget_ends_in_a_hold_gives_feishus_answer_as_the_reason(
        redis_client: redis.Redis, simulator: Simulator, chat_id: str) -> None:
    """The last attempt waits for the quota (Feishu's 3 s hold) past the 2 s budget: the
    reply is given up for what Feishu answered, not for the wait."""
    redis_client.delete(app_key(simulator.app_id))
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=1000))
    api = OpenApi(simulator.url, simulator.app_id, SecretStr(simulator.app_secret))
    replies = Replies(api, RetryPolicy(budget_s=2), quota=quota)
    message_id = simulator.send_text(chat_id, "hello", deliver=False)
    simulator.set_send_faults(SendFaults(rate_limit_429=1.0, rate_limit_reset_s=3))
    try:
        with pytest.raises(RetryableError) as raised:
            replies.send_text(message_id, "hi", uuid=reply_uuid(message_id), chat_id=chat_id)
    finally:
        simulator.set_send_faults(None)
        api.close()
    assert "quota" not in str(raised.value), raised.value
    assert "HTTP 429" in str(raised.value), raised.value


def test_a_chat_token_is_given_back_when_the_apps_quota_has_no_room(
        redis_client: redis.Redis) -> None:
    quota = Quota(redis_client, Rates(per_s=1000, per_min=100_000, chat_per_s=1))
    redis_client.delete(app_key("cli_a"), "gw:quota:chat:oc_back")
    quota.hold("cli_a", 0.5)
    assert not quota.acquire("cli_a", "oc_back", timeout_s=0.2)  # the chat's token, no app's
    assert quota.acquire("cli_a", timeout_s=1)  # the hold is over (the app's bucket only)
    assert quota.acquire("cli_a", "oc_back", timeout_s=0), "the chat's token was wasted"
    assert not quota.acquire("cli_a", "oc_back", timeout_s=0), "the chat had two tokens"
