"""Reaction events read on their own (pure): a person's or an app's, added or taken back,
and the ones that name no message or emoji; the metric's emoji labels stay bounded."""

from __future__ import annotations

import pytest

from gateway.core.errors import MalformedEvent
from gateway.feishu.inbound.reaction_events import ADDED, REMOVED, emoji_label, parse_reaction
from gateway.simulator.chat_events import reaction_event


def test_a_persons_reaction_and_an_apps() -> None:
    person = parse_reaction(ADDED, reaction_event("om_1", "THUMBSUP", True, "ou_ann", "user",
                                                  app_id="cli_a"))
    assert (person.message_id, person.emoji, person.added, person.by_user, person.by) == (
        "om_1", "THUMBSUP", True, True, "ou_ann")
    assert person.event_id and person.at_ms > 0
    app = parse_reaction(REMOVED, reaction_event("om_1", "Typing", False, "", "app",
                                                 app_id="cli_a"))
    assert (app.added, app.by_user, app.by) == (False, False, "")


@pytest.mark.parametrize("event", [
    {}, {"message_id": "om_1"}, {"message_id": "om_1", "reaction_type": {"emoji_type": ""}},
    {"message_id": "bad\nid", "reaction_type": {"emoji_type": "OK"}},
    {"message_id": "om_1", "reaction_type": {"emoji_type": "X" * 65}},
    {"message_id": 7, "reaction_type": "OK"}])
def test_an_event_naming_no_message_or_emoji_is_malformed(event: dict[str, object]) -> None:
    with pytest.raises(MalformedEvent):
        parse_reaction(ADDED, {"event": event})


def test_a_bad_action_time_is_unknown_not_an_error() -> None:
    read = parse_reaction(ADDED, {"event": {"message_id": "om_1", "action_time": "soon",
                                            "reaction_type": {"emoji_type": "OK"}}})
    assert read.at_ms == 0 and read.by_user


def test_the_metric_names_common_emoji_and_counts_the_rest_as_other() -> None:
    assert emoji_label("THUMBSUP") == "THUMBSUP"
    assert {emoji_label(f"Made{n}") for n in range(1000)} == {"other"}
