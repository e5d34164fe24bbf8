"""The per-chat lock registry stays bounded and never evicts a held lock."""

from __future__ import annotations

import tracemalloc
from contextlib import ExitStack

from gateway.chats.store_types import TurnRef
from gateway.worker.handles import ChatHandles


def turn(chat_id: str, fence: int = 1) -> TurnRef:
    return TurnRef(chat_id, "om_1", fence)


def test_registry_stays_within_cap_over_100k_chats_while_held_locks_survive() -> None:
    registry = ChatHandles(cap=1000)
    with ExitStack() as held:
        pinned = [held.enter_context(registry.hold(turn(f"held-{i}", i))) for i in range(10)]
        for i in range(100_000):
            with registry.hold(turn(f"chat-{i}")):
                assert len(registry) <= registry.cap + len(pinned) + 1
        assert len(registry) <= registry.cap
        assert all(f"held-{i}" in registry for i in range(10))
        assert len(registry.running()) == len(pinned)
    assert "chat-99999" in registry and "chat-0" not in registry


def test_over_cap_rather_than_evict_a_held_lock() -> None:
    registry = ChatHandles(cap=2)
    with ExitStack() as held:
        for i in range(5):
            held.enter_context(registry.hold(turn(f"c{i}")))
        assert len(registry) == 5
    assert len(registry) == 2


def test_memory_is_flat_as_distinct_chats_grow() -> None:
    """Memory after 100k chats equals memory after 300k: nothing grows per chat."""
    registry = ChatHandles(cap=1000)
    tracemalloc.start()
    try:
        for i in range(100_000):
            with registry.hold(turn(f"chat-{i}")):
                pass
        early, _ = tracemalloc.get_traced_memory()
        for i in range(100_000, 300_000):
            with registry.hold(turn(f"chat-{i}")):
                pass
        late, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(registry) == 1000
    assert late - early < 64 * 1024, f"grew by {late - early} bytes"


def test_a_stale_turn_of_the_same_chat_cannot_stop_the_current_one() -> None:
    """With the threads pool, a re-dispatched turn runs beside the stale one in the
    same process; each has its own stop event."""
    registry = ChatHandles(cap=10)
    with registry.hold(turn("c", 1)) as stale, registry.hold(turn("c", 2)) as current:
        stale.stop("lost its lease")
        assert stale.stopped.is_set() and not current.stopped.is_set()
        assert {h.turn.fence for h in registry.running()} == {1, 2}
