"""What a person does on the fake Feishu: send messages of every type, forwards,
attachments, card clicks and raw events to a bot, redeliver them, withdraw them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from gateway.simulator import payloads as p
from gateway.simulator.core import SimulatorCore
from gateway.simulator.records import MessageRecord

ForwardChild: TypeAlias = tuple[str, "dict[str, Any] | str | Sequence[ForwardChild]", str]
"""One message inside a merge_forward: (msg_type, content, sender). The sender is a user's
open_id, or an app_id ("cli_...") for a bot's message; a "merge_forward" child's content
is the list of its own children."""
MERGED = "Merged and Forwarded Message"
"""The content of a merge_forward, in its event and in the get-message answer."""
ATTACHMENT_NAMES = {"image": "image.png", "file": "a.txt", "audio": "voice.opus",
                    "media": "video.mp4"}
"""The message types send_attachment sends, and each one's default file name."""


class EventDelivery(SimulatorCore):
    """The simulator delivering events to its bots' long connections (the facade's
    docstring, simulator.py, tells how)."""

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
        """Deliver an im.message.receive_v1 event of any type to a client of `app_id`;
        returns its message_id. Without `app_id`, a group message goes to each app whose bot
        it @mentions, each as its own event (same message id), and any other to the primary
        app (`AppRegistry.recipients`).

        With deliver=False the message only exists on the platform (replies to it work),
        as when a listener took it and died before acting on it; during `set_outage` it
        exists and is never pushed. `create_time_ms` (default:
        now) backdates the message, e.g. to deliver one sent hours ago. A reply to
        `parent_id` carries root_id too (the parent's root, else the parent), as Feishu's
        events do."""
        if not deliver and len(self.apps.recipients(app_id, chat_type, mentions or ())) > 1:
            raise ValueError("deliver=False holds one app's event: name it with app_id")
        message_id, events = self._message(
            chat_id, message_type=message_type, content=content, sender_open_id=sender_open_id,
            chat_type=chat_type, mentions=mentions, message_id=message_id,
            thread_id=thread_id, root_id=root_id, parent_id=parent_id,
            create_time_ms=create_time_ms, app_id=app_id)
        for event, app in events:
            if deliver and self.push_lost(app):
                self.state.bump("pushes-lost")
            elif deliver:
                self._deliver(event, parts=parts, frame_type="event", message_id=message_id,
                              app_id=app)
            else:
                self._held[message_id] = (event, app)
        return message_id

    def _message(self, chat_id: str, *, message_type: str, content: dict[str, Any] | str,
                 sender_open_id: str = "ou_user_1", chat_type: str = "p2p",
                 mentions: list[dict[str, Any]] | None = None, message_id: str | None = None,
                 thread_id: str | None = None, root_id: str | None = None,
                 parent_id: str | None = None, create_time_ms: int | None = None,
                 app_id: str | None = None) -> tuple[str, list[tuple[bytes, str]]]:
        """A message a user sends, recorded on the platform: its id, and the event each app
        it goes to gets (send_message's arguments)."""
        apps = self.apps.recipients(app_id, chat_type, mentions or ())
        app = apps[0]
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        created = p.now_ms() if create_time_ms is None else create_time_ms
        if parent_id and root_id is None:
            parent = self.state.get_message(parent_id)
            root_id = (parent.root_id if parent is not None else None) or parent_id
        incoming = p.IncomingMessage(
            message_id=message_id or p.new_id("om_"), chat_id=chat_id, chat_type=chat_type,
            message_type=message_type, content=text, sender_open_id=sender_open_id,
            create_time_ms=created, mentions=tuple(mentions or ()), root_id=root_id,
            parent_id=parent_id or root_id, thread_id=thread_id)
        self.state.put_message(MessageRecord(
            message_id=incoming.message_id, chat_id=chat_id, msg_type=message_type,
            content=text, from_bot=False, create_time_ms=created, update_time_ms=created,
            chat_type=chat_type, root_id=root_id, parent_id=incoming.parent_id,
            thread_id=thread_id, app_id=app.app_id, sender_open_id=sender_open_id,
            mentions=tuple(incoming.mentions)))
        if chat_type == "p2p":
            self.state.remember_p2p_chat(app.app_id, sender_open_id, chat_id)
        return incoming.message_id, [
            (encode_event(p.message_receive_event(incoming, app_id=each.app_id)), each.app_id)
            for each in apps]

    def send_burst(self, texts: Mapping[str, Sequence[str]],
                   timeout_s: float = 300.0) -> dict[str, list[str]]:
        """Every chat's users writing at once: for each chat, a user who sends its texts in
        order (direct messages), each as soon as the one before was delivered (in webhook
        mode: its push answered), all on the simulator's own loop (no caller's thread slows
        it); each chat's message ids, in order."""
        redeliverer = self._running_redeliverer

        async def user(chat_id: str, items: Sequence[str]) -> list[str]:
            sent = []
            for text in items:
                message_id, [(event, app)] = self._message(
                    chat_id, message_type="text", content={"text": text})
                frame_id = uuid.uuid4().hex
                self.state.record_frame(frame_id, event, message_id, None, app_id=app)
                await redeliverer.deliver(
                    event, frame_id=frame_id, event_key=frame_id, frame_type="event",
                    parts=1, message_id=message_id, timeout_s=self.delivery_timeout_s,
                    app_id=app)
                sent.append(message_id)
            return sent

        async def everyone() -> dict[str, list[str]]:
            chats = list(texts)
            done = await asyncio.gather(*(user(chat, texts[chat]) for chat in chats))
            return dict(zip(chats, done, strict=True))

        return self._call(everyone(), timeout_s)

    def send_merge_forward(self, chat_id: str, children: Sequence[ForwardChild], *,
                           sender_open_id: str = "ou_user_1", chat_type: str = "p2p",
                           message_id: str | None = None, deliver: bool = True,
                           app_id: str | None = None) -> str:
        """Deliver a merge_forward carrying `children`, [(msg_type, content, sender), ...]
        (see ForwardChild); returns its message_id. GET /im/v1/messages/{id} lists it,
        then each child (nested ones after theirs), each with upper_message_id."""
        app = self.apps.get(app_id)
        mid = message_id or p.new_id("om_")
        self._put_children(mid, chat_id, children, app.app_id)
        return self.send_message(chat_id, message_type="merge_forward", content=MERGED,
                                 sender_open_id=sender_open_id, chat_type=chat_type,
                                 message_id=mid, deliver=deliver, app_id=app.app_id)

    def _put_children(self, upper: str, chat_id: str, children: Sequence[ForwardChild],
                      app_id: str) -> None:
        for msg_type, content, sender in children:
            mid, now, nested = p.new_id("om_"), p.now_ms(), None
            if isinstance(content, (list, tuple)):
                nested, text = content, MERGED
            else:
                text = content if isinstance(content, str) else json.dumps(
                    content, ensure_ascii=False)
            bot = sender.startswith("cli_")
            self.state.put_message(MessageRecord(
                message_id=mid, chat_id=chat_id, msg_type=msg_type, content=text,
                from_bot=bot, create_time_ms=now, update_time_ms=now,
                app_id=sender if bot else app_id, sender_open_id=None if bot else sender,
                upper_message_id=upper))
            if nested is not None:
                self._put_children(mid, chat_id, nested, app_id)

    def send_attachment(self, chat_id: str, data: bytes, *, message_type: str = "file",
                        name: str | None = None, file_key: str | None = None,
                        content_type: str | None = None, sender_open_id: str = "ou_user_1",
                        chat_type: str = "p2p", message_id: str | None = None,
                        parent_id: str | None = None, deliver: bool = True,
                        app_id: str | None = None) -> tuple[str, str]:
        """Deliver an image, file, audio or media message whose bytes GET .../resources/
        {key}?type=image (image) or type=file (the others) serves, registered before the
        event goes out; returns (message_id, file_key). Its Content-Type is `content_type`,
        else guessed from `name` (default: see ATTACHMENT_NAMES)."""
        if message_type not in ATTACHMENT_NAMES:
            raise ValueError(f"an attachment is one of {sorted(ATTACHMENT_NAMES)}")
        name = name or ATTACHMENT_NAMES[message_type]
        image = message_type == "image"
        key = file_key or p.new_id("img_v3_" if image else "file_v3_")
        content: dict[str, Any] = {"image_key": key} if image else {"file_key": key}
        if message_type in ("file", "media"):
            content["file_name"] = name
        if message_type in ("audio", "media"):
            content["duration"] = 1000
        mid = message_id or p.new_id("om_")
        self.state.resources.add(mid, key, data, kind="image" if image else "file", name=name,
                                 content_type=content_type)
        self.send_message(chat_id, message_type=message_type, content=content,
                          sender_open_id=sender_open_id, chat_type=chat_type, message_id=mid,
                          parent_id=parent_id, deliver=deliver, app_id=app_id)
        return mid, key

    def send_post(self, chat_id: str, paragraphs: list[list[dict[str, Any]]], *,
                  images: dict[str, bytes] | None = None, title: str = "",
                  sender_open_id: str = "ou_user_1", chat_type: str = "p2p",
                  thread_id: str | None = None) -> str:
        """Deliver a rich-text post (`paragraphs` of elements, as Feishu's content has them);
        `images` (image_key → bytes) are served as its resources, for its `img` elements.
        Returns its message_id."""
        mid = p.new_id("om_")
        for key, data in (images or {}).items():
            self.state.resources.add(mid, key, data, kind="image", name=f"{key}.png",
                                     content_type="image/png")
        return self.send_message(chat_id, message_type="post",
                                 content={"title": title, "content": paragraphs},
                                 sender_open_id=sender_open_id, chat_type=chat_type,
                                 message_id=mid, thread_id=thread_id)

    def deliver_held(self, message_id: str) -> str:
        """Deliver now a message sent earlier with deliver=False (its create_time is when it
        was sent): an event Feishu redelivers late. Returns the frame id."""
        event, app_id = self._held.pop(message_id)
        return self._deliver(event, parts=1, frame_type="event", message_id=message_id,
                             app_id=app_id)

    def withdraw(self, message_id: str) -> None:
        """The user recalls a message: replies to it, reactions on it and GETs of it get
        code 230011 from now on (its resources 230110); a message that never existed
        answers 231003 instead."""
        self.state.remove_message(message_id)

    def send_text(self, chat_id: str, text: str, *, sender_open_id: str = "ou_user_1",
                  chat_type: str = "p2p", mentions: list[dict[str, Any]] | None = None,
                  message_id: str | None = None, thread_id: str | None = None,
                  root_id: str | None = None, parent_id: str | None = None, parts: int = 1,
                  deliver: bool = True, create_time_ms: int | None = None,
                  app_id: str | None = None) -> str:
        """Deliver a text message; mention keys missing from `text` are prepended."""
        missing = [m["key"] for m in mentions or () if str(m.get("key", "")) not in text]
        full = " ".join([*missing, text]) if missing else text
        return self.send_message(
            chat_id, message_type="text", content={"text": full}, sender_open_id=sender_open_id,
            chat_type=chat_type, mentions=mentions, message_id=message_id, thread_id=thread_id,
            root_id=root_id, parent_id=parent_id, parts=parts, deliver=deliver,
            create_time_ms=create_time_ms, app_id=app_id)

    def send_event(self, payload: dict[str, Any] | bytes | str, *, parts: int = 1,
                   frame_type: str = "event", app_id: str | None = None) -> str:
        """Deliver a raw (possibly malformed) payload, as is, to a client of `app_id`
        (default: the primary app); returns the frame message_id.

        A dict with event.message (message_id, chat_id) is remembered, so the bot can reply.
        """
        app = self.apps.get(app_id)
        message = p.event_message(payload) if isinstance(payload, dict) else None
        if isinstance(payload, dict) and message is not None:
            now, sender = p.now_ms(), p.event_sender(payload)
            self.state.put_message(MessageRecord(
                message_id=message["message_id"], chat_id=message["chat_id"],
                msg_type=str(message.get("message_type", "text")),
                content=str(message.get("content", "")), from_bot=False, create_time_ms=now,
                update_time_ms=now, root_id=message.get("root_id"),
                parent_id=message.get("parent_id"), thread_id=message.get("thread_id"),
                app_id=app.app_id, sender_open_id=sender))
        if isinstance(payload, dict):
            data = encode_event(payload)
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
        return self._deliver(encode_event(event), parts=parts, frame_type="event", message_id=None,
                             app_id=app.app_id, card_message_id=open_message_id)

    def redeliver(self, message_id: str, *, parts: int = 1, app_id: str | None = None) -> str:
        """Re-send the same payload (same event_id) as a new frame; returns the new frame id.

        It goes to a client of `app_id`, by default of the app the event went to first
        (the primary app unless the event named another one); a message that went to
        several apps is redelivered as `app_id`'s own event. The frame joins its event: a
        200 ACK of it stops automatic redelivery too."""
        frame = self.state.find_frame(message_id, app_id) or self.state.find_frame(message_id)
        if frame is None:
            raise KeyError(f"simulator never delivered a message or frame {message_id!r}")
        target = self.apps.get(app_id or frame.app_id).app_id
        return self._deliver(frame.payload, parts=parts, frame_type="event",
                             message_id=frame.message_id, event_key=frame.event_key,
                             app_id=target, card_message_id=frame.card_message_id)


def encode_event(payload: dict[str, Any]) -> bytes:
    """UTF-8 JSON; a lone surrogate (a hostile test's) goes as JSON's escape, as it can."""
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload).encode()
