"""The Stop button of a streaming card (gateway/feishu/outbound/stream_card.py): a click ends
the turn as /stop does, answered at once with a toast.

The click is judged here, on the connection's ingest thread (never the SDK's loop), within
Feishu's 3 s: who may stop the turn is who may decide its approvals (the requester, admins,
allowlisted users; in a DM, its user: gateway/approvals/policy.py), a stranger is refused
and nothing changes. Then one Redis step (ChatStore.clicks.click_stop) writes a stop job, deduped by
the click's token (Feishu's redelivery counts once) and bound to the turn the card was shown
for; the control desk ends the turn through the canceller, with /stop's records (no debounce:
the click names its turn), and the worker closes the card saying who stopped it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.approvals.clicks import toast
from gateway.approvals.policy import may_decide
from gateway.chats.scope import chat_of
from gateway.chats.store import ChatStore
from gateway.core.logs import shown
from gateway.feishu.inbound.fields import mapping, text_field
from gateway.feishu.outbound.stream_card import STOP_ACTION

logger = logging.getLogger(__name__)


def _when(header: Mapping[str, Any]) -> int:
    """When the click was made (the event's create_time, ms on Feishu's clock; 0 unknown)."""
    try:
        return max(int(str(header.get("create_time") or "0")), 0)
    except ValueError:
        return 0


class StopButton:
    def __init__(self, store: ChatStore, *, admins: frozenset[str] = frozenset(),
                 allowed: frozenset[str] = frozenset()) -> None:
        self._store = store
        self.admins, self.allowed = admins, allowed

    def on_click(self, app_id: str, payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A `card.action.trigger` event → the callback's answer (None: not a Stop button)."""
        event = mapping(payload.get("event"))
        value = mapping(mapping(event.get("action")).get("value"))
        if value.get("action") != STOP_ACTION:
            return None
        chat, turn = text_field(value.get("chat")), text_field(value.get("turn"))
        requester = text_field(value.get("requester"))
        chat_type = text_field(value.get("chat_type"))
        clicker = text_field(mapping(event.get("operator")).get("open_id"))
        token = text_field(event.get("token") or mapping(payload.get("header")).get("event_id"))
        if not chat or not turn or not token:
            logger.warning("stop click by %s ignored: the button names no turn", shown(clicker))
            return toast("error", "This button names no answer to stop.")
        shown_in = text_field(mapping(event.get("context")).get("open_chat_id"))
        if shown_in and shown_in != chat_of(chat):  # (a state id: chat@app/topic)
            logger.warning("stop click by %s refused: a button of chat %s clicked in %s",
                           shown(clicker), shown(chat), shown(shown_in))
            return toast("error", "This button names no answer to stop.")
        dm_user = requester if chat_type == "p2p" else ""
        if not may_decide(clicker, requester=requester, chat_type=chat_type, dm_user=dm_user,
                          admins=self.admins, allowed=self.allowed):
            logger.warning("stop click in chat %s by %s refused: not the requester, an admin "
                           "or allowed", shown(chat), shown(clicker or "?"))
            return toast("error", "You may not stop this answer.")
        click = self._store.clicks.click_stop(chat, turn, clicker, token,
                                       _when(mapping(payload.get("header"))))
        logger.info("stop click in chat %s on the turn of %s by %s: %s", shown(chat),
                    shown(turn), shown(clicker), click.outcome)
        if click.outcome == "over":
            return toast("info", "This answer has already ended.")
        return toast("success", "Stopping…")
