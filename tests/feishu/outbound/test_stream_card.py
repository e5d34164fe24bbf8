"""The streaming card's JSON (pure): the Stop button while it streams, the finished steps in
a collapsed panel once closed, both accepted by the simulator's card validator."""

from __future__ import annotations

from gateway.feishu.outbound.stream_card import closed_card, stop_value, streaming_card
from gateway.simulator.cardjson import card_text, check_card, nodes


def test_a_streaming_card_carries_a_stop_button_naming_the_turn() -> None:
    value = stop_value("oc_1", "om_1", "ou_req", "group")
    card = streaming_card("⏳ searching\n\nhello", element_id="answer", stop=value)
    check_card(card)
    assert card["config"]["streaming_mode"] is True
    [button] = [n for n in nodes(card["body"]) if n["tag"] == "button"]
    assert button["behaviors"][0]["value"] == {"action": "stop", "chat": "oc_1", "turn": "om_1",
                                               "requester": "ou_req", "chat_type": "group"}


def test_a_closed_card_lists_the_finished_steps_collapsed_and_has_no_button() -> None:
    card = closed_card("the answer", element_id="answer", footer="⏹ Stopped.",
                       steps=[("search", 1.25), ("read", 75.0)], dropped=2, elapsed_s=76.3)
    check_card(card)
    assert "streaming_mode" not in card["config"]
    assert not [n for n in nodes(card["body"]) if n["tag"] == "button"]
    [panel] = [n for n in nodes(card["body"]) if n["tag"] == "collapsible_panel"]
    assert panel["expanded"] is False
    assert card_text(card).split("\n") == [
        "the answer", "4 steps · 1 min 16 s", "… 2 earlier steps", "3. search (1.2 s)",
        "4. read (1 min 15 s)", "⏹ Stopped."]


def test_a_closed_card_without_steps_is_the_plain_answer() -> None:
    card = closed_card("the answer", element_id="answer")
    assert card_text(card) == "the answer" and len(card["body"]["elements"]) == 1
