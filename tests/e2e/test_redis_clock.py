"""Redis's clock stepping back (NTP, a VM resumed, a failover to a replica whose clock is
behind) on a real redis-server under libfaketime: a crashed turn is recovered within its
own lease TTL and a user's /stop is not taken for a double tap. (The send quota:
feishu/outbound/test_quota.py; a whole gateway under a stepping Redis: the chaos suite.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from gateway.chats.cancel import Canceller, Stopping
from gateway.ops.processes import wait_until
from tests.support.clocks import SteppedClock, stepped_redis
from tests.support.store import first_turn, store_for

STEP_S = -300


@pytest.fixture
def stepped() -> Iterator[tuple[SteppedClock, redis.Redis]]:
    """A Redis whose clock the test steps, and a client of it."""
    with stepped_redis() as found:
        yield found


def test_a_crashed_turn_is_recovered_within_its_lease_after_a_step_back(
        stepped: tuple[SteppedClock, redis.Redis], chat_id: str) -> None:
    clock, client = stepped
    store = store_for(client, running_ttl_ms=1000)
    turn = first_turn(store, chat_id, 2)
    assert store.recovery.due_chats() == []  # the sweeper has seen the clock
    assert store.turns.start(turn, "task-1", "w") is not None  # then its worker dies
    clock.step(STEP_S)
    began = time.monotonic()

    def recovered() -> object:
        return store.recovery.due_chats() and store.recovery.recover(chat_id)

    found = wait_until(recovered, 10, "the crashed turn to be recovered")
    assert isinstance(found, tuple) and found[1].message_id == "om_1"
    assert time.monotonic() - began < 3, "recovered after the lease's own TTL, not the step"


def test_a_stop_after_a_step_back_is_no_double_tap(
        stepped: tuple[SteppedClock, redis.Redis], chat_id: str) -> None:
    clock, client = stepped
    store = store_for(client)
    canceller = Canceller(store, lambda t: None, lambda t, k: None, timeout_s=1,
                          lease_ttl_ms=5000, debounce_s=3)
    assert not isinstance(canceller.begin(chat_id, "cmd-1"), Stopping)  # nothing ran
    clock.step(STEP_S)
    turn = first_turn(store, chat_id)
    assert store.turns.start(turn, "task-1", "w") is not None
    assert isinstance(canceller.begin(chat_id, "cmd-2"), Stopping), "the running turn stops"
