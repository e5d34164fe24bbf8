"""Clients of the simulator's open APIs: plain HTTP with one app's tenant token, and the
reference SDK's."""

from __future__ import annotations

import json
from typing import Any

import httpx
import lark_oapi as lark
from lark_oapi.api.im.v1 import ReplyMessageRequest, ReplyMessageRequestBody

from gateway.simulator import Simulator

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"


MESSAGES = "/open-apis/im/v1/messages"


CARDS = "/open-apis/cardkit/v1/cards"


class Api:
    """A plain HTTP client of the simulator's open APIs, with one app's tenant token."""

    def __init__(self, sim: Simulator, app_id: str | None = None,
                 app_secret: str | None = None) -> None:
        self.http = httpx.Client(base_url=sim.url, trust_env=False, timeout=5)
        body = self.http.post(TOKEN_PATH, json={"app_id": app_id or sim.app_id,
                                                "app_secret": app_secret or sim.app_secret})
        self.auth = {"Authorization": f"Bearer {body.json()['tenant_access_token']}"}

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Any = None,
             params: dict[str, str] | None = None) -> httpx.Response:
        return self.http.request(method, path, json=body, params=params, headers=self.auth)

    def code(self, method: str, path: str, body: Any = None,
             params: dict[str, str] | None = None) -> int:
        return int(self.call(method, path, body, params).json()["code"])

    def send(self, chat_id: str, msg_type: str, content: dict[str, Any],
             uuid: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"receive_id": chat_id, "msg_type": msg_type,
                                "content": json.dumps(content, ensure_ascii=False)}
        if uuid is not None:
            body["uuid"] = uuid
        return self.call("POST", MESSAGES, body, {"receive_id_type": "chat_id"})

    def reply(self, message_id: str, msg_type: str, content: dict[str, Any],
              uuid: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"msg_type": msg_type,
                                "content": json.dumps(content, ensure_ascii=False)}
        if uuid is not None:
            body["uuid"] = uuid
        return self.call("POST", f"{MESSAGES}/{message_id}/reply", body)

    def create_card(self, card: dict[str, Any]) -> httpx.Response:
        return self.call("POST", CARDS, {"type": "card_json", "data": json.dumps(card)})

    def stream(self, card_id: str, element_id: str, text: str, sequence: int,
               uuid: str | None = None) -> httpx.Response:
        body: dict[str, Any] = {"content": text, "sequence": sequence}
        if uuid is not None:
            body["uuid"] = uuid
        return self.call("PUT", f"{CARDS}/{card_id}/elements/{element_id}/content", body)


def streaming_card(text: str = "…") -> dict[str, Any]:
    return {"schema": "2.0", "config": {"update_multi": True, "streaming_mode": True},
            "body": {"elements": [{"tag": "markdown", "content": text,
                                   "element_id": "answer"}]}}


def api_client(sim: Simulator) -> lark.Client:
    return (lark.Client.builder().app_id(sim.app_id).app_secret(sim.app_secret)
            .domain(sim.url).log_level(lark.LogLevel.WARNING).build())


def reply(client: lark.Client, message_id: str, text: str, uuid: str | None = None) -> Any:
    body = ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": text}))
    if uuid is not None:
        body = body.uuid(uuid)
    request = ReplyMessageRequest.builder().message_id(message_id).request_body(body.build())
    return client.im.v1.message.reply(request.build())
