"""The synchronous, thread-safe façade: a fake Feishu running on its own loop and thread."""

from __future__ import annotations

import json
import uuid
from typing import Any

from gateway.simulator import payloads as p
from gateway.simulator.core import SimulatorCore
from gateway.simulator.state import MessageRecord


class Simulator(SimulatorCore):
    """A fake Feishu open platform on loopback for the real lark-oapi SDK.

    Events are delivered to exactly one connected client of the event's app (the primary
    app, the constructor's, unless a call names another one added with `add_app`),
    round-robin. When no such client is connected, a send waits up to `delivery_timeout_s`
    for one, then raises TimeoutError.

    With `redeliver_after_s` set, an event none of whose frames got an ACK with code 200
    is redelivered in the background as a new frame (same payload, same event_id) after
    `redeliver_after_s`, then twice that, ... up to `redeliver_cap_s`, at most
    `redeliver_max` times; a redelivery waits for a client of its app to be connected.

    Card callbacks are judged against `card_answer_limit_ms` (Feishu: 3 s), see
    `card_response`.
    """

    def _deliver(self, payload: bytes, *, parts: int, frame_type: str,
                 message_id: str | None, app_id: str, event_key: str | None = None,
                 card_message_id: str | None = None) -> str:
        redeliverer = self._running_redeliverer
        frame_id = uuid.uuid4().hex
        self.state.record_frame(frame_id, payload, message_id, event_key, app_id=app_id,
                                card_message_id=card_message_id)
        self._call(redeliverer.deliver(
            payload, frame_id=frame_id, event_key=event_key or frame_id, frame_type=frame_type,
            parts=parts, message_id=message_id, timeout_s=self.delivery_timeout_s,
            app_id=app_id, card_message_id=card_message_id), self.delivery_timeout_s)
        return frame_id

    def send_message(self, chat_id: str, *, message_type: str, content: dict[str, Any] | str,
                     sender_open_id: str = "ou_user_1", chat_type: str = "p2p",
                     mentions: list[dict[str, Any]] | None = None,
                     message_id: str | None = None, thread_id: str | None = None,
                     root_id: str | None = None, parent_id: str | None = None,
                     parts: int = 1, deliver: bool = True, create_time_ms: int | None = None,
                     app_id: str | None = None) -> str:
        """Deliver an im.message.receive_v1 event of any type to a client of `app_id`
        (default: the primary app); returns its message_id.

        With deliver=False the message only exists on the platform (replies to it work),
        as when a listener took it and died before acting on it. `create_time_ms` (default:
        now) backdates the message, e.g. to deliver one sent hours ago."""
        app = self.apps.get(app_id)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        created = p.now_ms() if create_time_ms is None else create_time_ms
        incoming = p.IncomingMessage(
            message_id=message_id or p.new_id("om_"), chat_id=chat_id, chat_type=chat_type,
            message_type=message_type, content=text, sender_open_id=sender_open_id,
            create_time_ms=created, mentions=tuple(mentions or ()), root_id=root_id,
            parent_id=parent_id or root_id, thread_id=thread_id)
        self.state.put_message(MessageRecord(
            message_id=incoming.message_id, chat_id=chat_id, msg_type=message_type,
            content=text, from_bot=False, create_time_ms=created, update_time_ms=created,
            chat_type=chat_type, root_id=root_id, parent_id=incoming.parent_id,
            thread_id=thread_id, app_id=app.app_id))
        if chat_type == "p2p":
            self.state.remember_p2p_chat(app.app_id, sender_open_id, chat_id)
        event = _encode(p.message_receive_event(incoming, app_id=app.app_id))
        if deliver:
            self._deliver(event, parts=parts, frame_type="event", message_id=incoming.message_id,
                          app_id=app.app_id)
        else:
            self._held[incoming.message_id] = (event, app.app_id)
        return incoming.message_id

    def deliver_held(self, message_id: str) -> str:
        """Deliver now a message sent earlier with deliver=False (its create_time is when it
        was sent): an event Feishu redelivers late. Returns the frame id."""
        event, app_id = self._held.pop(message_id)
        return self._deliver(event, parts=1, frame_type="event", message_id=message_id,
                             app_id=app_id)

    def withdraw(self, message_id: str) -> None:
        """The user recalls a message: replies to it get code 230011 from now on."""
        self.state.remove_message(message_id)

    def send_text(self, chat_id: str, text: str, *, sender_open_id: str = "ou_user_1",
                  chat_type: str = "p2p", mentions: list[dict[str, Any]] | None = None,
                  message_id: str | None = None, thread_id: str | None = None,
                  root_id: str | None = None, parts: int = 1, deliver: bool = True,
                  create_time_ms: int | None = None, app_id: str | None = None) -> str:
        """Deliver a text message; mention keys missing from `text` are prepended."""
        missing = [m["key"] for m in mentions or () if str(m.get("key", "")) not in text]
        full = " ".join([*missing, text]) if missing else text
        return self.send_message(
            chat_id, message_type="text", content={"text": full}, sender_open_id=sender_open_id,
            chat_type=chat_type, mentions=mentions, message_id=message_id, thread_id=thread_id,
            root_id=root_id, parts=parts, deliver=deliver, create_time_ms=create_time_ms,
            app_id=app_id)

    def send_event(self, payload: dict[str, Any] | bytes | str, *, parts: int = 1,
                   frame_type: str = "event", app_id: str | None = None) -> str:
        """Deliver a raw (possibly malformed) payload, as is, to a client of `app_id`
        (default: the primary app); returns the frame message_id.

        A dict with event.message (message_id, chat_id) is remembered, so the bot can reply.
        """
        app = self.apps.get(app_id)
        message = p.event_message(payload) if isinstance(payload, dict) else None
        if message is not None:
            now = p.now_ms()
            self.state.put_message(MessageRecord(
                message_id=message["message_id"], chat_id=message["chat_id"],
                msg_type=str(message.get("message_type", "text")),
                content=str(message.get("content", "")), from_bot=False, create_time_ms=now,
                update_time_ms=now, root_id=message.get("root_id"),
                parent_id=message.get("parent_id"), thread_id=message.get("thread_id"),
                app_id=app.app_id))
        if isinstance(payload, dict):
            data = _encode(payload)
        else:
            data = payload.encode("utf-8") if isinstance(payload, str) else payload
        return self._deliver(data, parts=parts, frame_type=frame_type, app_id=app.app_id,
                             message_id=None if message is None else message["message_id"])

    def send_card_action(self, chat_id: str, open_message_id: str, operator_open_id: str,
                         value: dict[str, Any], *, parts: int = 1, tag: str = "button",
                         form_value: dict[str, Any] | None = None, token: str | None = None,
                         app_id: str | None = None) -> str:
        """Deliver a card.action.trigger callback (type=event frame) to a client of `app_id`
        (default: the primary app); returns the frame id, for `card_response`.

        Each event carries a fresh event.token unless `token` repeats one. An answer in
        time with {"card": {"type": "raw", "data": {...}}} replaces the content of the
        clicked message `open_message_id`, as Feishu does."""
        app = self.apps.get(app_id)
        event = p.card_action_event(
            app_id=app.app_id, chat_id=chat_id, open_message_id=open_message_id,
            operator_open_id=operator_open_id, value=value, tag=tag, form_value=form_value,
            token=token)
        return self._deliver(_encode(event), parts=parts, frame_type="event", message_id=None,
                             app_id=app.app_id, card_message_id=open_message_id)

    def redeliver(self, message_id: str, *, parts: int = 1, app_id: str | None = None) -> str:
        """Re-send the same payload (same event_id) as a new frame; returns the new frame id.

        It goes to a client of `app_id`, by default of the app the event went to first
        (the primary app unless the event named another one). The frame joins its event:
        a 200 ACK of it stops automatic redelivery too."""
        frame = self.state.find_frame(message_id)
        if frame is None:
            raise KeyError(f"simulator never delivered a message or frame {message_id!r}")
        target = self.apps.get(app_id or frame.app_id).app_id
        return self._deliver(frame.payload, parts=parts, frame_type="event",
                             message_id=frame.message_id, event_key=frame.event_key,
                             app_id=target, card_message_id=frame.card_message_id)


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")
