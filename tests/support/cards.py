"""A streaming card's Stop button, as the suites click it, and its card once closed."""

from __future__ import annotations

from typing import Any

from gateway.simulator import Simulator
from gateway.simulator.cardjson import nodes
from gateway.simulator.cards import CardView
from gateway.simulator.records import SentMessage


def stop_button(view: CardView) -> dict[str, Any]:
    [button] = [n for n in nodes(view.card.get("body")) if n.get("tag") == "button"]
    return dict(button["behaviors"][0]["value"])


def click_stop(sim: Simulator, chat_id: str, card: SentMessage, who: str,
               token: str | None = None, value: dict[str, Any] | None = None) -> Any:
    """Click the card's Stop button (`value`: the button's, else read from the card)."""
    if value is None:
        value = stop_button(sim.wait_for_card(card.message_id, streaming=True))
    frame = sim.send_card_action(chat_id, card.message_id, who, value, token=token)
    response = sim.card_response(frame, timeout_s=10)
    assert not response.late, f"answered in {response.latency_ms:.0f} ms, over Feishu's 3 s"
    return response


def closed(sim: Simulator, card: SentMessage) -> CardView | None:
    """The card once the gateway closed it (its Stop button gone), else None."""
    view = sim.card(card.card_id or "")
    if view is None or [n for n in nodes(view.card.get("body")) if n.get("tag") == "button"]:
        return None
    return view
