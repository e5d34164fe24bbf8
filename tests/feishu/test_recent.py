"""`Turn.recent`'s reading of the messages list API, on its own: the last n messages before
the turn's, oldest first, deleted and forwarded ones left out, a bot's marked."""

from __future__ import annotations

import json
from typing import Any

from gateway.core.model import Message
from gateway.feishu.inbound.recent import chat_lines


def item(message_id: str, text: str, at_ms: int, *, app: bool = False,
         **extra: Any) -> dict[str, Any]:
    return {"message_id": message_id, "msg_type": "text", "create_time": str(at_ms),
            "body": {"content": json.dumps({"text": text})},
            "sender": {"id": "cli_bot" if app else "ou_user", "sender_type":
                       "app" if app else "user"}, **extra}


TURN = Message("om_now", "oc_1", "group", "ou_user", "text", "what now?", create_time_ms=5000)
LISTED = [  # newest first, as the list API answers ByCreateTimeDesc
    item("om_later", "sent after the turn's", 6000),
    item("om_now", "what now?", 5000),
    item("om_answer", "echo: plan B", 4000, app=True),
    item("om_gone", "withdrawn", 3500, deleted=True),
    item("om_inside", "in a forward", 3200, upper_message_id="om_fwd"),
    item("om_b", "plan B", 3000),
    item("om_a", "plan A", 2000),
]


def test_the_last_messages_before_the_turns_come_oldest_first() -> None:
    lines = chat_lines(LISTED, TURN, 3)
    assert [(line.text, line.from_app) for line in lines] == [
        ("plan A", False), ("plan B", False), ("echo: plan B", True)]
    assert [line.text for line in chat_lines(LISTED, TURN, 1)] == ["echo: plan B"]
    assert chat_lines([], TURN, 5) == () and chat_lines(LISTED, TURN, 0) == ()
    assert lines[0].sender_id == "ou_user" and lines[0].create_time_ms == 2000
