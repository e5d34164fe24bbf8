"""FEISHU_MENU and the menu's click events, read on their own (pure)."""

from __future__ import annotations

import pytest

from gateway.core.errors import MalformedEvent
from gateway.core.rules import parse_menu
from gateway.feishu.inbound.events import parse_message
from gateway.feishu.inbound.menu_events import menu_message_event, parse_menu_click
from gateway.simulator.chat_events import menu_event


def test_the_menu_maps_keys_to_commands_or_text() -> None:
    assert parse_menu("") == {}
    assert parse_menu('{"new": "/new", "sum": "  summarise today  "}') == {
        "new": "/new", "sum": "summarise today"}


@pytest.mark.parametrize("raw", ["[1]", "{", '{"k": ""}', '{"k": 3}', '{"": "x"}',
                                 '{"' + "k" * 31 + '": "x"}', '{"a|b": "x"}',
                                 '{"k": "' + "x" * 4001 + '"}'])
def test_a_bad_menu_is_refused_with_a_reason(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_menu(raw)


def test_a_click_names_its_key_and_person_and_reads_as_their_message() -> None:
    click = parse_menu_click(menu_event("sum", "ou_ann", app_id="cli_a"))
    assert (click.key, click.open_id) == ("sum", "ou_ann")
    assert click.event_id and click.at_ms % 1000 == 0 and click.at_ms > 10**12
    echo = {"message_id": "om_echo", "chat_id": "oc_dm", "create_time": "1700000000000"}
    message = parse_message(menu_message_event(echo, "ou_ann", "summarise today"))
    assert (message.message_id, message.chat_id, message.chat_type, message.sender_open_id,
            message.text, message.create_time_ms) == (
        "om_echo", "oc_dm", "p2p", "ou_ann", "summarise today", 1_700_000_000_000)


@pytest.mark.parametrize("event", [{}, {"event_key": "k"}, {"event_key": "",
                                   "operator": {"operator_id": {"open_id": "ou_a"}}},
                                   {"event_key": "k", "operator": {"operator_id": "ou_a"}}])
def test_a_click_naming_no_key_or_person_is_malformed(event: dict[str, object]) -> None:
    with pytest.raises(MalformedEvent):
        parse_menu_click({"event": event})
