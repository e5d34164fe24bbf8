"""`turn.recent(n)` end to end: an agent @mentioned in a group reads what was said before
(messages it was not asked about, its own answers marked), oldest first, through the
simulator's messages list API; in a direct message the same."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.replies import reply_of
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
