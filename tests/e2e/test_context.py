"""The context a user points at, end to end through the simulator with real workers:
`turn.recent(n)` (an agent @mentioned in a group reads what was said before, its own
answers marked, oldest first; in a direct message the same; a list API that fails or has
more pages) and `turn.message.quote_chain` (the messages a reply replied to, nearest first,
with sender and attachments, bounded in depth; a read that fails keeps what was read)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.worker.enricher import QUOTE_DEPTH
from tests.support.agents import TINY_PNG
from tests.support.replies import replies_to, reply_of
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, FEISHU_REQUIRE_MENTION="true") as rig:
        yield rig


def test_an_agent_mentioned_in_a_group_reads_what_was_being_discussed(rig: Rig) -> None:
    sim, group = rig.sim, "oc_recent_group"
    sim.send_text(group, "shall we ship on Friday?", chat_type="group",
                  sender_open_id="ou_ann")
    sim.send_text(group, "only if the tests pass", chat_type="group", sender_open_id="ou_bob")
    asked = sim.send_text(group, "recent 2", chat_type="group", sender_open_id="ou_ann",
                          mentions=[sim.mention_bot()])
    assert reply_of(sim, group, asked) == (
        "recent: ou_ann: shall we ship on Friday? | ou_bob: only if the tests pass")


def test_in_a_direct_message_the_bots_own_answers_are_among_them(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_recent_dm"
    assert reply_of(sim, dm, sim.send_text(dm, "one")) == "echo: one"
    two = sim.send_text(dm, "two")
    assert reply_of(sim, dm, two) == "echo: two"
    asked = sim.send_text(dm, "recent 3")
    assert reply_of(sim, dm, asked) == "recent: bot: echo: one | ou_user_1: two | bot: echo: two"


def test_a_list_api_that_fails_is_retried_then_told_and_the_chat_goes_on(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_recent_failing"
    assert reply_of(sim, dm, sim.send_text(dm, "before")) == "echo: before"
    sim.script_list_faults(["5xx-html", "429"])  # (a retry or two: the agent never knows)
    assert reply_of(sim, dm, sim.send_text(dm, "recent 1")) == "recent: bot: echo: before"
    sim.script_list_faults(["5xx-json"] * 200)  # (past the retry budget)
    try:
        failing = sim.send_text(dm, "recent 1")
        after = sim.send_text(dm, "next")
        assert reply_of(sim, dm, failing, 60) == "recent failed: RetryableError"
        assert reply_of(sim, dm, after) == "echo: next"
    finally:
        sim.clear_list_faults()


def test_a_chat_with_more_pages_is_read_once_per_turn(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_recent_pages"
    for n in range(4):
        sim.send_text(dm, f"old {n}", deliver=False)
    calls = len(sim.list_calls)
    asked = sim.send_text(dm, "recent 2")
    assert reply_of(sim, dm, asked) == "recent: ou_user_1: old 2 | ou_user_1: old 3"
    assert [c.chat_id for c in sim.list_calls[calls:]] == [dm]  # one page, never the next


def test_a_reply_sees_the_chain_it_replied_to_nearest_first(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_quote_chain"
    picture, _ = sim.send_attachment(dm, TINY_PNG, message_type="image", deliver=False)
    about = sim.send_text(dm, "what is in this picture?", parent_id=picture)
    assert reply_of(sim, dm, about) == "echo: what is in this picture?"
    answer = next(m.message_id for m in sim.sent_messages(dm) if m.reply_to == about)
    asked = sim.send_text(dm, "chain", parent_id=answer)
    assert reply_of(sim, dm, asked) == (
        "chain: bot: echo: what is in this picture? < ou_user_1: what is in this picture? "
        "< ou_user_1: [image] [image]")


def test_the_chain_is_bounded_and_a_failed_read_keeps_what_was_read(rig: Rig) -> None:
    sim, dm = rig.sim, "oc_quote_long"
    parent = ""
    ids = []
    for n in range(QUOTE_DEPTH + 2):
        parent = sim.send_text(dm, f"m{n}", parent_id=parent or None, deliver=False)
        ids.append(parent)
    asked = sim.send_text(dm, "chain", parent_id=parent)
    expected = [f"ou_user_1: m{n}" for n in reversed(range(2, QUOTE_DEPTH + 2))]
    assert reply_of(sim, dm, asked) == "chain: " + " < ".join(expected)
    sim.fail_read(ids[-3], "5xx-json")  # the third one up cannot be read
    try:
        again = sim.send_text(dm, "chain", parent_id=parent)
        assert reply_of(sim, dm, again) == "chain: " + " < ".join(expected[:2])
    finally:
        sim.fail_read(ids[-3], None)
    assert replies_to(sim, dm).keys() == {asked, again}
