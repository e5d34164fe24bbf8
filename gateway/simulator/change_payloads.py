"""Pure builders for the events about messages and chats after the fact (schema 2.0), in
the shapes lark-oapi's models read (P2ImMessageRecalledV1, P2ImChatMemberBotAddedV1,
P2ImChatMemberBotDeletedV1, P2ImChatAccessEventBotP2pChatEnteredV1). lark-oapi 1.7.5 has no
model for `im.message.updated_v1`: its event is built as `im.message.receive_v1`'s (sender
and message, the content as it is now) with update_time past create_time."""

from __future__ import annotations

from typing import Any

from gateway.simulator import payloads as p


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
