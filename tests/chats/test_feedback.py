"""Reactions recorded on the turns they answered (lua/feedback.lua), on their own: the newest
of a person's added and removed wins whatever order the events come in, and a full chat
makes room by dropping what was taken back."""

from __future__ import annotations

import redis

from gateway.chats.feedback_steps import REACTIONS_CAP
from tests.support.store import store_for


def test_the_newest_of_added_and_removed_wins_in_any_order(redis_client: redis.Redis) -> None:
    store = store_for(redis_client).feedback
    assert store.record_reaction("oc_fb", "om_turn", "THUMBSUP", False, "ou_a", 2000) == "recorded"
    assert store.record_reaction("oc_fb", "om_turn", "THUMBSUP", True, "ou_a", 1000) == "older"
    assert store.reactions("oc_fb") == {}
    store.record_reaction("oc_fb", "om_turn", "HEART", True, "ou_b", 3000)
    assert store.reactions("oc_fb") == {"om_turn": [("HEART", "ou_b")]}


def test_a_full_chat_makes_room_by_dropping_reactions_taken_back(
        redis_client: redis.Redis) -> None:
    store = store_for(redis_client).feedback
    for n in range(REACTIONS_CAP):
        store.record_reaction("oc_full", f"om_{n}", "OK", True, "ou_a", 1000)
    assert store.record_reaction("oc_full", "om_new", "OK", True, "ou_a", 1000) == "full"
    store.record_reaction("oc_full", "om_0", "OK", False, "ou_a", 2000)
    assert store.record_reaction("oc_full", "om_new", "OK", True, "ou_a", 3000) == "recorded"
    shown = store.reactions("oc_full")
    assert "om_0" not in shown and shown["om_new"] == [("OK", "ou_a")]
    assert len(shown) == REACTIONS_CAP
