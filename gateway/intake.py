"""The listener's one step per event: normalise, admit in one Redis step, hand off.

Runs on the SDK's event loop, so it does exactly one Redis round trip and never touches
the broker or Feishu's APIs: publishing goes to the outbox thread; commands and notices are
recorded in Redis by that same step, and the control desk acts on them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.dispatch import Publisher
from gateway.errors import MalformedEvent
from gateway.events import is_from_bot, parse_command, parse_message
from gateway.outbox import Outbox
from gateway.state.store import ChatStore, Dispatch, NotDurable

logger = logging.getLogger(__name__)


class Intake:
    def __init__(self, store: ChatStore, publisher: Publisher, outbox: Outbox, *,
                 max_text_chars: int, bot_open_id: str = "") -> None:
        self._store = store
        self._publisher = publisher
        self._outbox = outbox
        self.max_text_chars = max_text_chars
        self.bot_open_id = bot_open_id

    def accept(self, payload: Mapping[str, Any]) -> str:
        """Admit one `im.message.receive_v1` payload; returns what happened to it.

        A malformed event is logged in one line and dropped (its ACK still goes back);
        a Redis failure propagates, so the SDK answers 500 and Feishu redelivers."""
        event_id = str((payload.get("header") or {}).get("event_id", "?"))
        if is_from_bot(payload):
            logger.debug("event %s from a bot ignored", event_id)
            return "ignored"
        try:
            message = parse_message(payload, bot_open_id=self.bot_open_id,
                                    max_text_chars=self.max_text_chars)
        except MalformedEvent as error:
            logger.warning("event %s dropped: %s", event_id, error)
            return "malformed"
        command = parse_command(message.text) or ""
        try:
            admission = self._store.ingest(message, command)
        except NotDurable as error:  # ACK 500 (Feishu redelivers), but publish what it did
            if error.admission.dispatch is not None:
                self._publish(error.admission.dispatch)
            raise
        if admission.outcome == "command":
            logger.info("command /%s in chat %s (message %s)", command, message.chat_id,
                        message.message_id)
        else:
            logger.debug("message %s of chat %s: %s (%d waiting)", message.message_id,
                        message.chat_id, admission.outcome, admission.waiting)
        if admission.dispatch is not None:
            self._publish(admission.dispatch)
        return admission.outcome

    def _publish(self, turn: Dispatch) -> None:
        self._outbox.submit(lambda: self._publisher.publish(turn))
