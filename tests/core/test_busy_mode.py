"""Busy modes in the settings (GATEWAY_BUSY_MODE, FEISHU_GROUP_RULES' `busy`) and what an
agent reads of a merged turn."""

from __future__ import annotations

import pytest

from gateway.core.errors import SettingsError
from gateway.core.model import Message, Turn
from gateway.core.rules import parse_group_rules
from gateway.core.settings import load_settings


def test_a_group_s_own_busy_mode_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_BUSY_MODE", "merge")
    monkeypatch.setenv("FEISHU_GROUP_RULES",
                       '{"oc_calm": {"busy": "queue"}, "oc_hasty": {"busy": "interrupt"}}')
    rules = load_settings(_env_file=None).admission_rules
    assert rules.busy_of("oc_calm") == "queue"
    assert rules.busy_of("oc_hasty") == "interrupt"
    assert rules.busy_of("oc_other") == "merge"


def test_queue_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GATEWAY_BUSY_MODE", raising=False)
    monkeypatch.delenv("FEISHU_GROUP_RULES", raising=False)
    settings = load_settings(_env_file=None)
    assert settings.busy_mode == "queue" and settings.merge_window_ms == 1500
    assert settings.admission_rules.busy_of("oc_any") == "queue"


def test_a_mode_not_offered_stops_start_up_with_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_BUSY_MODE", "later")
    with pytest.raises(SettingsError) as refused:
        load_settings(_env_file=None)
    line = str(refused.value)
    assert "\n" not in line and "GATEWAY_BUSY_MODE" in line and "queue" in line


def test_a_group_rule_with_an_unknown_busy_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="oc_a: busy mode must be one of queue, merge, "
                                         "interrupt"):
        parse_group_rules('{"oc_a": {"busy": "later"}}')


def test_a_merged_turn_reads_every_message_with_its_sender_and_time() -> None:
    first = Message("om_1", "oc_1", "group", "ou_ann", "text", "first thought",
                    create_time_ms=1_700_000_000_000)
    last = Message("om_2", "oc_1", "group", "ou_bob", "text", "and a second\nline",
                   create_time_ms=1_700_000_003_000)
    turn = Turn(last, 7, messages=(first, last))
    assert turn.message_id == "om_2", "the reply answers the last one"
    assert turn.text == ("[22:13:20 UTC] ou_ann: first thought\n"
                         "[22:13:23 UTC] ou_bob: and a second\nline")
    alone = Turn(first, 7)
    assert alone.messages == (first,) and alone.text == "first thought"
