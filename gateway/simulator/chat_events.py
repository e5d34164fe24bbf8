"""What a person does on the fake Feishu after a message went out, and to the bot's
membership: recall or edit a message, react to one, add the bot to a group or remove it,
open its direct chat. Each changes the platform as Feishu does and delivers Feishu's event for it.

The events are built (pure functions below) in the shapes lark-oapi's models read
(P2ImMessageRecalledV1, P2ImChatMemberBotAddedV1, P2ImChatMemberBotDeletedV1,
P2ImChatAccessEventBotP2pChatEnteredV1). lark-oapi 1.7.5 has no model for
`im.message.updated_v1`: its event is built as `im.message.receive_v1`'s (sender and
message, the content as it is now) with update_time past create_time."""

from __future__ import annotations

import json
from typing import Any

from gateway.simulator import payloads as p
from gateway.simulator.events import EventDelivery, encode_event


class ChatEventDelivery(EventDelivery):
    def react(self, message_id: str, emoji: str, *, operator_open_id: str = "ou_user_1",
              operator_type: str = "user") -> str:
        """A person (or, `operator_type` "app", an app) adds reaction `emoji` to a message:
        it stands on the message (`reactions`) and im.message.reaction.created_v1 goes to
        the app of the message's chat; returns the reaction id."""
        app_id = self._reacted(message_id)
        reaction_id = p.new_id("rc_")
        self.state.add_reaction(message_id, reaction_id, emoji)
        self._deliver(encode_event(reaction_event(
            message_id, emoji, True, operator_open_id, operator_type, app_id=app_id)),
            parts=1, frame_type="event", message_id=None, app_id=app_id)
        return reaction_id

    def unreact(self, message_id: str, reaction_id: str, *,
                operator_open_id: str = "ou_user_1") -> None:
        """The person takes reaction `reaction_id` back: im.message.reaction.deleted_v1."""
        app_id = self._reacted(message_id)
        emoji = self.state.delete_reaction(message_id, reaction_id)
        if emoji is None:
            raise KeyError(f"simulator: no reaction {reaction_id!r} on {message_id!r}")
        self._deliver(encode_event(reaction_event(
            message_id, emoji, False, operator_open_id, "user", app_id=app_id)),
            parts=1, frame_type="event", message_id=None, app_id=app_id)

    def click_menu(self, event_key: str, *, operator_open_id: str = "ou_user_1",
                   app_id: str | None = None) -> str:
        """A person clicks an item of the bot's menu (in their direct chat with it):
        application.bot.menu_v6 goes to the app; returns the frame id."""
        app = self.apps.get(app_id).app_id
        return self._deliver(encode_event(menu_event(event_key, operator_open_id, app_id=app)),
                             parts=1, frame_type="event", message_id=None, app_id=app)

    def _reacted(self, message_id: str) -> str:
        """The app whose chat the message is in."""
        rec = self.state.get_message(message_id)
        if rec is None:
            raise KeyError(f"simulator: no message {message_id!r} to react to")
        return self.apps.get(rec.app_id).app_id

    def recall(self, message_id: str, *, deliver: bool = True) -> str | None:
        """The user withdraws a message (see `withdraw`: replies to it get 230011 from now
        on) and im.message.recalled_v1 goes to the app it was sent to; returns the frame
        id (None with deliver=False: only the platform knows)."""
        rec = self.state.get_message(message_id)
        if rec is None:
            raise KeyError(f"simulator: no message {message_id!r} to recall")
        self.withdraw(message_id)
        if not deliver:
            return None
        app = self.apps.get(rec.app_id)
        return self._deliver(encode_event(recalled_event(message_id, rec.chat_id,
                                                       app_id=app.app_id)),
                             parts=1, frame_type="event", message_id=None, app_id=app.app_id)

    def edit(self, message_id: str, text: str) -> str:
        """The user edits a text message: it reads `text` from now on (GET shows it
        updated) and im.message.updated_v1 goes to its app; returns the frame id."""
        rec = self.state.get_message(message_id)
        if rec is None or rec.from_bot:
            raise KeyError(f"simulator: no user message {message_id!r} to edit")
        content = json.dumps({"text": text}, ensure_ascii=False)
        edited = self.state.edit_message(message_id, "text", content) or rec
        incoming = p.IncomingMessage(
            message_id=message_id, chat_id=rec.chat_id, chat_type=rec.chat_type or "p2p",
            message_type="text", content=content, sender_open_id=rec.sender_open_id or "",
            create_time_ms=rec.create_time_ms, mentions=tuple(rec.mentions),
            root_id=rec.root_id, parent_id=rec.parent_id, thread_id=rec.thread_id)
        app = self.apps.get(rec.app_id)
        event = updated_event(incoming, app_id=app.app_id, update_ms=edited.update_time_ms)
        return self._deliver(encode_event(event), parts=1, frame_type="event", message_id=None,
                             app_id=app.app_id)

    def add_bot(self, chat_id: str, *, operator_open_id: str = "ou_user_1",
                app_id: str | None = None, name: str = "") -> str:
        """A user adds the bot (of `app_id`, default the primary app) to a group: it may
        send there again; im.chat.member.bot.added_v1 goes to it. Returns the frame id."""
        app = self.apps.get(app_id)
        self.state.set_member(app.app_id, chat_id, True)
        return self._chat_event(member_event("im.chat.member.bot.added_v1", chat_id,
                                                app_id=app.app_id, name=name,
                                                operator_open_id=operator_open_id), app.app_id)

    def remove_bot(self, chat_id: str, *, operator_open_id: str = "ou_user_1",
                   app_id: str | None = None, deliver: bool = True) -> str | None:
        """A user removes the bot from a group: from now on its sends to the chat (create,
        reply) get code 230002, as Feishu answers a bot outside the group, and
        im.chat.member.bot.deleted_v1 goes to it. Returns the frame id (None with
        deliver=False: the event is lost, only the platform knows)."""
        app = self.apps.get(app_id)
        self.state.set_member(app.app_id, chat_id, False)
        if not deliver:
            return None
        return self._chat_event(member_event("im.chat.member.bot.deleted_v1", chat_id,
                                                app_id=app.app_id,
                                                operator_open_id=operator_open_id), app.app_id)

    def open_p2p(self, open_id: str = "ou_user_1", *, chat_id: str | None = None,
                 app_id: str | None = None) -> str:
        """A user opens the bot's direct chat: im.chat.access_event.bot_p2p_chat_entered_v1
        goes to the app, naming the chat's last message when it has one (none: a first
        visit). Returns the frame id."""
        app = self.apps.get(app_id)
        chat = chat_id or self.state.p2p_chat(app.app_id, open_id) or f"oc_p2p_{open_id}"
        self.state.remember_p2p_chat(app.app_id, open_id, chat)
        last = self.state.last_message(chat)
        return self._chat_event(p2p_entered_event(
            chat, app_id=app.app_id, operator_open_id=open_id,
            last_message_id=last.message_id if last else "",
            last_create_ms=last.create_time_ms if last else 0), app.app_id)

    def _chat_event(self, event: dict[str, Any], app_id: str) -> str:
        return self._deliver(encode_event(event), parts=1, frame_type="event", message_id=None,
                             app_id=app_id)


def recalled_event(message_id: str, chat_id: str, *, app_id: str,
                   recall_type: str = "message_owner") -> dict[str, Any]:
    return {"schema": "2.0", "header": p.event_header("im.message.recalled_v1", app_id),
            "event": {"message_id": message_id, "chat_id": chat_id,
                      "recall_time": str(p.now_ms()), "recall_type": recall_type}}


def updated_event(msg: p.IncomingMessage, *, app_id: str, update_ms: int) -> dict[str, Any]:
    event = p.message_receive_event(msg, app_id=app_id)
    event["header"]["event_type"] = "im.message.updated_v1"
    event["event"]["message"]["update_time"] = str(update_ms)
    return event


def member_event(event_type: str, chat_id: str, *, app_id: str, operator_open_id: str,
                 name: str = "") -> dict[str, Any]:
    """im.chat.member.bot.added_v1 or .deleted_v1."""
    return {"schema": "2.0", "header": p.event_header(event_type, app_id),
            "event": {"chat_id": chat_id, "operator_id": p.user_ids(operator_open_id),
                      "external": False, "operator_tenant_key": p.TENANT_KEY,
                      "name": name or chat_id, "i18n_names": {"zh_cn": name or chat_id}}}


def p2p_entered_event(chat_id: str, *, app_id: str, operator_open_id: str,
                      last_message_id: str = "", last_create_ms: int = 0) -> dict[str, Any]:
    event: dict[str, Any] = {"chat_id": chat_id, "operator_id": p.user_ids(operator_open_id)}
    if last_message_id:
        event["last_message_id"] = last_message_id
        event["last_message_create_time"] = str(last_create_ms)
    return {"schema": "2.0",
            "header": p.event_header("im.chat.access_event.bot_p2p_chat_entered_v1", app_id),
            "event": event}


def reaction_event(message_id: str, emoji: str, added: bool, operator_open_id: str,
                   operator_type: str, *, app_id: str) -> dict[str, Any]:
    """im.message.reaction.created_v1 / deleted_v1 (P2ImMessageReactionCreatedV1's shape):
    the message and who reacted, not the chat."""
    kind = "created" if added else "deleted"
    event: dict[str, Any] = {"message_id": message_id, "reaction_type": {"emoji_type": emoji},
                             "operator_type": operator_type, "action_time": str(p.now_ms())}
    if operator_type == "user":
        event["user_id"] = p.user_ids(operator_open_id)
    else:
        event["app_id"] = app_id
    return {"schema": "2.0", "header": p.event_header(f"im.message.reaction.{kind}_v1", app_id),
            "event": event}


def menu_event(event_key: str, operator_open_id: str, *, app_id: str) -> dict[str, Any]:
    """application.bot.menu_v6 (P2ApplicationBotMenuV6's shape): who clicked which key, and
    when (a timestamp in seconds, as Feishu's example); no chat."""
    return {"schema": "2.0", "header": p.event_header("application.bot.menu_v6", app_id),
            "event": {"operator": {"operator_name": operator_open_id,
                                   "operator_id": p.user_ids(operator_open_id)},
                      "event_key": event_key, "timestamp": str(p.now_ms() // 1000)}}
