"""The bot's menu, the listener's part.

On the ingest thread (`MenuIntake`): a click on a key FEISHU_MENU maps becomes a control
job in one Redis step (deduped by event id), so it is recorded before it is ACKed; a key
not mapped is one log line and no reply. On the control desk (`MenuDesk`): the bot echoes
the click into the person's direct chat (`☰ <text>`, sent to their open_id: Feishu's event
names no chat, and this is how the chat is found, made if need be), and that echo goes in
as the message the person typed, through the intake like any message: the same admission,
the chat's order, a command (/new, /stop) run as typed; the answer replies to the echo.
The echo's uuid is the event's, so a job taken again (its listener died) finds the same
message, which the chat's dedupe then drops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gateway.chats.jobs import ControlJob
from gateway.chats.store import ChatStore
from gateway.core import metrics
from gateway.core.errors import MalformedEvent, RejectedError
from gateway.core.logs import shown
from gateway.feishu.inbound.menu_events import (
    ECHO_MARK,
    MENU_EVENT,
    menu_message_event,
    parse_menu_click,
)
from gateway.feishu.outbound.delivery import Replies, reply_uuid

logger = logging.getLogger(__name__)

Receive = Callable[[Mapping[str, Any], str], str]
"""The intake's step for one message event of an app; what it did."""


class MenuIntake:
    """An event hook (gateway/listener/event_hooks.py): a click on the bot menu noted."""

    event_types = frozenset({MENU_EVENT})

    def __init__(self, store: ChatStore, menu: Mapping[str, str]) -> None:
        self._store, self.menu = store, dict(menu)

    def handle(self, event_type: str, payload: Mapping[str, Any], app_id: str) -> str:
        """One menu event: `noted`, `duplicate`, `unmapped` or `malformed` (one line each
        for the last two, no reply). A Redis failure propagates (ACK 500)."""
        outcome = self._note(payload, app_id)
        metrics.changed("menu", outcome)
        return outcome

    def _note(self, payload: Mapping[str, Any], app_id: str) -> str:
        try:
            click = parse_menu_click(payload)
        except MalformedEvent as error:
            logger.warning("menu event dropped: %s", error)
            return "malformed"
        text = self.menu.get(click.key)
        if text is None:
            logger.warning("menu key %r clicked by %s is not in FEISHU_MENU: ignored",
                           click.key, shown(click.open_id))
            return "unmapped"
        outcome = self._store.feedback.note_event(
            click.open_id, click.event_id or f"menu:{click.open_id}:{click.key}:{click.at_ms}",
            kind="menu", app=app_id, task=click.event_id, why=text, fence=click.open_id,
            sent_ms=click.at_ms)
        logger.info("menu %r clicked by %s: %s", click.key, shown(click.open_id), outcome)
        return outcome


class MenuDesk:
    def __init__(self, replies: Replies, receive: Receive) -> None:
        self._replies, self._receive = replies, receive

    def perform(self, job: ControlJob) -> None:
        """A `menu` job: echo the click in the person's direct chat, then take the echo in
        as their message. A failed send or step raises (the job is taken again)."""
        open_id, text = job.target, job.why
        try:
            echo = self._replies.call(
                f"menu echo to {shown(open_id)}",
                lambda api: api.send_to_user(open_id, msg_type="text",
                                             content={"text": ECHO_MARK + text},
                                             uuid=reply_uuid(f"menu:{job.task or job.job_id}")),
                app_id=job.app)
        except RejectedError as error:  # (the person cannot be written to: nothing to answer)
            logger.warning("menu click by %s dropped: its echo was refused: %s",
                           shown(open_id), error)
            return
        outcome = self._receive(menu_message_event(echo, open_id, text), job.app)
        logger.info("menu click by %s in chat %s taken as %r: %s", shown(open_id),
                    shown(str(echo.get("chat_id") or "?")), text[:40], outcome)
