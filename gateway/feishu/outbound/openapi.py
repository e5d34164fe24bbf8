"""Feishu's open API over one pool of kept-alive HTTP/1.1 connections, one attempt per call.

`OpenApi._call` is the one place where an answer becomes a value or a classified error:
anything that may succeed later (network errors, HTTP 5xx whatever the body, an answer that
is not JSON, rate limits, an expired token) is a RetryableError; what cannot (the request
or the target is wrong, permission is missing) is a RejectedError. Nothing else escapes.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any

from pydantic import SecretStr

from gateway.core.errors import (
    CredentialsRefused,
    RateLimited,
    RejectedError,
    RetryableError,
    TooLarge,
)
from gateway.feishu.outbound.http_pool import Answer, HttpPool, TransportError, json_body, multipart

RATE_LIMIT_CODES = frozenset({99991400, 99991402, 11020, 11021, 230020})
"""Feishu's frequency control (99991400 is "request trigger frequency limit")."""
TOKEN_CODES = frozenset({99991661, 99991663, 99991664, 99991665, 99991666, 99991668})
"""The tenant token is missing, invalid or expired: fetch a new one and try again."""
BUSY_CODES = frozenset({1})
"""Feishu says it is busy or failed internally."""
TARGET_GONE_CODES = frozenset({230011, 231003})
"""The message replied to was withdrawn or no longer exists: send to its chat instead."""
BOT_NOT_IN_CHAT = frozenset({230002})
"""The bot is not in the chat (it was removed): never retried, the send is given up."""
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
TOKEN_MARGIN_S = 300.0
DOWNLOAD_BLOCK_BYTES = 65536


def _retry_after(response: Answer) -> float | None:
    for header in ("x-ogw-ratelimit-reset", "retry-after"):
        value = response.headers.get(header)
        try:
            return max(float(value), 0.0) if value is not None else None
        except ValueError:
            continue
    return None


def classify(response: Answer, what: str) -> dict[str, Any]:
    """The body of a successful answer, or the error this answer means (pure)."""
    status = response.status
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    code = body.get("code") if isinstance(body, dict) else None
    msg = str(body.get("msg", "")) if isinstance(body, dict) else ""
    detail = f"{what}: HTTP {status}" + (f", code {code}: {msg}" if code is not None else "")
    if status == 429 or code in RATE_LIMIT_CODES:
        raise RateLimited(detail, code=code if isinstance(code, int) else None,
                          retry_after_s=_retry_after(response))
    if not isinstance(body, dict) or not isinstance(code, int):
        kind = "not JSON" if body is None else "no code"
        if 400 <= status < 500 and status not in (408, 425):
            raise RejectedError(f"{detail} ({kind})")  # a wrong URL or a refusing proxy
        raise RetryableError(f"{detail} ({kind})")
    if status >= 500:
        raise RetryableError(detail, code=code)
    if code == 0:
        return body
    if code in TOKEN_CODES or code in BUSY_CODES:
        raise RetryableError(detail, code=code)
    raise RejectedError(detail, code=code)


DATE_STEP_S = 5.0
"""A Date this far behind the clock read so far means Feishu's clock stepped back: it is
taken as it is."""


class OpenApi:
    """Thread-safe; the tenant token is fetched on first use and renewed before it expires."""

    def __init__(self, domain: str, app_id: str, app_secret: SecretStr, *,
                 timeout_s: float = 10.0) -> None:
        self.app_id = app_id
        self._secret = app_secret
        self._http = HttpPool(domain, timeout_s=timeout_s,
                              connect_timeout_s=min(timeout_s, 5.0), size=8, idle_s=60.0)
        self._token_lock = threading.Lock()
        self._token = ""
        self._token_expires_at = 0.0
        self._date: tuple[float, float] | None = None
        """Feishu's clock as its last answer's Date header gave it (epoch s), and when that
        answer came (time.monotonic())."""

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, what: str, *, body: Any = None,
              params: dict[str, str] | None = None, token: str | None = None,
              form: dict[str, str] | None = None,
              files: dict[str, tuple[str, bytes]] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if files is not None:
            data, content_type = multipart(form or {}, files)
        elif body is not None:
            data, content_type = json_body(body), "application/json; charset=utf-8"
        else:
            data, content_type = None, ""
        try:
            response = self._http.request(method, path, params=params, headers=headers,
                                          body=data, content_type=content_type)
        except TransportError as error:  # connect, read, reset, protocol errors
            raise RetryableError(f"{what}: {error}") from None
        self._note_date(response.headers.get("date"))
        return classify(response, what)

    def _note_date(self, header: str | None) -> None:
        """Feishu's clock from an answer's Date: to the second, so each reading is up to a
        second behind; the one ahead of the others is kept (the estimate never jumps back,
        and forward only as far as a reading improves it)."""
        if not header:
            return
        try:
            said_s = parsedate_to_datetime(header).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        now = time.monotonic()
        date = self._date
        if date is None or said_s > date[0] + now - date[1] or \
                said_s < date[0] + now - date[1] - DATE_STEP_S:  # (Feishu's clock stepped)
            self._date = (said_s, now)

    def feishu_now_ms(self) -> int | None:
        """Feishu's clock now (epoch ms, to within the Date header's second), as its last
        answer said and this host's monotonic clock carries on; None before any answer
        with a Date."""
        date = self._date
        if date is None:
            return None
        said_s, at = date
        return int((said_s + time.monotonic() - at) * 1000)

    def token(self) -> str:
        """The tenant access token, fetched when missing or about to expire."""
        with self._token_lock:
            if self._token and time.monotonic() < self._token_expires_at:
                return self._token
            try:
                body = self._call("POST", TOKEN_PATH, "tenant token", body={
                    "app_id": self.app_id, "app_secret": self._secret.get_secret_value()})
            except RejectedError as error:
                raise CredentialsRefused(f"feishu refused the app credentials: {error}",
                                         code=error.code) from None
            self._token = str(body.get("tenant_access_token", ""))
            expire_s = float(body.get("expire", 7200))
            self._token_expires_at = time.monotonic() + max(expire_s - TOKEN_MARGIN_S, 60.0)
            return self._token

    def _authorized(self, method: str, path: str, what: str, **kwargs: Any) -> dict[str, Any]:
        token = self.token()
        try:
            return self._call(method, path, what, token=token, **kwargs)
        except RetryableError as error:
            if error.code in TOKEN_CODES:
                self._forget(token)  # the next attempt fetches a new one
            raise

    def _forget(self, token: str) -> None:
        with self._token_lock:
            if self._token == token:
                self._token, self._token_expires_at = "", 0.0

    def reply(self, message_id: str, *, msg_type: str, content: dict[str, Any], uuid: str,
              in_thread: bool = False) -> str:
        """Reply to `message_id` (one attempt); Feishu sends at most one message per uuid."""
        body = {"msg_type": msg_type, "content": json.dumps(content, ensure_ascii=False),
                "uuid": uuid, "reply_in_thread": in_thread}
        data = self._authorized("POST", f"/open-apis/im/v1/messages/{message_id}/reply",
                                f"reply to {message_id}", body=body)
        return str((data.get("data") or {}).get("message_id", ""))

    def create(self, chat_id: str, *, msg_type: str, content: dict[str, Any],
               uuid: str) -> str:
        """Send a new message to a chat (one attempt); at most one per uuid."""
        body = {"receive_id": chat_id, "msg_type": msg_type, "uuid": uuid,
                "content": json.dumps(content, ensure_ascii=False)}
        data = self._authorized("POST", "/open-apis/im/v1/messages", f"message to {chat_id}",
                                body=body, params={"receive_id_type": "chat_id"})
        return str((data.get("data") or {}).get("message_id", ""))

    def send_to_user(self, open_id: str, *, msg_type: str, content: dict[str, Any],
                     uuid: str) -> dict[str, Any]:
        """Send a message to a person's direct chat with the bot (one attempt; at most one
        per uuid): the message object Feishu answers (message_id, chat_id, create_time)."""
        body = {"receive_id": open_id, "msg_type": msg_type, "uuid": uuid,
                "content": json.dumps(content, ensure_ascii=False)}
        data = self._authorized("POST", "/open-apis/im/v1/messages", "message to a person",
                                body=body, params={"receive_id_type": "open_id"})
        found = data.get("data")
        return found if isinstance(found, dict) else {}

    def create_card(self, card: dict[str, Any]) -> str:
        """Create a CardKit card entity (JSON 2.0) from `card`; its card_id."""
        data = self._authorized("POST", "/open-apis/cardkit/v1/cards", "card entity", body={
            "type": "card_json", "data": json.dumps(card, ensure_ascii=False)})
        return str((data.get("data") or {}).get("card_id", ""))

    def set_card_text(self, card_id: str, element_id: str, text: str, *, sequence: int,
                      uuid: str) -> None:
        """The full text of a streaming card's element (Feishu types out what is new)."""
        self._authorized(
            "PUT", f"/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content",
            f"card {card_id} text", body={"content": text, "sequence": sequence, "uuid": uuid})

    def set_card_settings(self, card_id: str, settings: dict[str, Any], *, sequence: int,
                          uuid: str) -> None:
        """Change a card entity's settings (`{"config": {"streaming_mode": true}}` turns
        streaming on again after Feishu closed it)."""
        self._authorized("PATCH", f"/open-apis/cardkit/v1/cards/{card_id}/settings",
                         f"card {card_id} settings",
                         body={"settings": json.dumps(settings, ensure_ascii=False),
                               "sequence": sequence, "uuid": uuid})

    def replace_card(self, card_id: str, card: dict[str, Any], *, sequence: int,
                     uuid: str) -> None:
        """Replace a card entity whole (its streaming mode included)."""
        self._authorized("PUT", f"/open-apis/cardkit/v1/cards/{card_id}", f"card {card_id}",
                         body={"card": {"type": "card_json",
                                        "data": json.dumps(card, ensure_ascii=False)},
                               "sequence": sequence, "uuid": uuid})

    def get_message(self, message_id: str) -> list[dict[str, Any]]:
        """A message as Feishu keeps it (`items`: the message, and for a merge_forward its
        children, each naming its `upper_message_id`)."""
        body = self._authorized("GET", f"/open-apis/im/v1/messages/{message_id}",
                                f"message {message_id}")
        items = (body.get("data") or {}).get("items")
        return [item for item in items if isinstance(item, dict)] \
            if isinstance(items, list) else []

    def list_messages(self, chat_id: str, *, start_s: int, end_s: int, page_size: int,
                      page_token: str = "", newest_first: bool = False,
                      thread: bool = False) -> dict[str, Any]:
        """One page of a chat's (`thread`: a topic's) messages created from `start_s` to
        `end_s` (epoch seconds), oldest first unless `newest_first` (one attempt); the
        answer's body (`data`: items, has_more, page_token: gateway/feishu/inbound/listed.py
        reads it)."""
        params = {"container_id_type": "thread" if thread else "chat",
                  "container_id": chat_id, "start_time": str(start_s), "end_time": str(end_s),
                  "sort_type": "ByCreateTimeDesc" if newest_first else "ByCreateTimeAsc",
                  "page_size": str(page_size)}
        if page_token:
            params["page_token"] = page_token
        return self._authorized("GET", "/open-apis/im/v1/messages",
                                f"messages of {chat_id}", params=params)

    def upload(self, kind: str, name: str, data: bytes, file_type: str = "stream") -> str:
        """Upload an image (`kind` image: im/v1/images, for messages) or a file (im/v1/files)
        for the bot to send (one attempt); its image_key or file_key."""
        if kind == "image":
            reply = self._authorized("POST", "/open-apis/im/v1/images", f"image {name}",
                                     form={"image_type": "message"},
                                     files={"image": (name, data)})
            return str((reply.get("data") or {}).get("image_key", ""))
        reply = self._authorized("POST", "/open-apis/im/v1/files", f"file {name}",
                                 form={"file_type": file_type, "file_name": name},
                                 files={"file": (name, data)})
        return str((reply.get("data") or {}).get("file_key", ""))

    def thread_root(self, thread_id: str) -> str:
        """The message id of a thread's first message (its root: what a message posted into
        the thread replies to, in the thread); "" when Feishu lists none (one attempt)."""
        body = self._authorized("GET", "/open-apis/im/v1/messages", f"messages of {thread_id}",
                                params={"container_id_type": "thread",
                                        "container_id": thread_id,
                                        "sort_type": "ByCreateTimeAsc", "page_size": "1"})
        items = (body.get("data") or {}).get("items")
        first = items[0] if isinstance(items, list) and items else {}
        return str(first.get("message_id") or "") if isinstance(first, dict) else ""

    def download(self, message_id: str, file_key: str, *, kind: str, max_bytes: int) -> bytes:
        """An attachment of a message (`kind`: image or file), read up to `max_bytes`;
        TooLarge beyond that (the download is cut off, not read to its end)."""
        token = self.token()
        what = f"resource {file_key} of {message_id}"
        path = f"/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
        try:
            with self._http.stream("GET", path, params={"type": kind},
                                   headers={"Authorization": f"Bearer {token}"}) as response:
                if response.status != 200 or (response.headers.get(
                        "content-type") or "").startswith("application/json"):
                    answer = Answer(response.status, response.headers, response.read())
                    classify(answer, what)  # raises what the error answer means
                    raise RejectedError(f"{what}: HTTP {response.status}")
                declared = response.headers.get("content-length") or ""
                if declared.isdigit() and int(declared) > max_bytes:
                    raise TooLarge(f"{what} is {int(declared)} bytes, over {max_bytes}")
                data = bytearray()
                while block := response.read(DOWNLOAD_BLOCK_BYTES):
                    data += block
                    if len(data) > max_bytes:
                        raise TooLarge(f"{what} is over {max_bytes} bytes")
                return bytes(data)
        except TransportError as error:
            raise RetryableError(f"{what}: {error}") from None
        except (OSError, http.client.HTTPException) as error:  # while reading the body
            raise RetryableError(f"{what}: {type(error).__name__}: {error}") from None

    def edit_message(self, message_id: str, *, msg_type: str, content: dict[str, Any]) -> None:
        """Replace the content of a text or post message the bot sent (PUT; Feishu allows
        20 edits of one message)."""
        self._authorized("PUT", f"/open-apis/im/v1/messages/{message_id}",
                         f"edit of {message_id}", body={
                             "msg_type": msg_type,
                             "content": json.dumps(content, ensure_ascii=False)})

    def patch_card(self, message_id: str, card: dict[str, Any]) -> None:
        """Replace a sent card's content (one attempt)."""
        self._authorized("PATCH", f"/open-apis/im/v1/messages/{message_id}",
                         f"card {message_id}", body={"content": json.dumps(card,
                                                                         ensure_ascii=False)})

    def add_reaction(self, message_id: str, emoji_type: str) -> str:
        """React to a message (one attempt); the reaction's id."""
        body = self._authorized("POST", f"/open-apis/im/v1/messages/{message_id}/reactions",
                                f"reaction on {message_id}",
                                body={"reaction_type": {"emoji_type": emoji_type}})
        return str((body.get("data") or {}).get("reaction_id", ""))

    def delete_reaction(self, message_id: str, reaction_id: str) -> None:
        self._authorized("DELETE",
                         f"/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}",
                         f"reaction {reaction_id} on {message_id}")

    def bot_info(self) -> dict[str, Any]:
        """The bot's identity; note Feishu puts it under `bot`, not `data`."""
        body = self._authorized("GET", "/open-apis/bot/v3/info", "bot info")
        bot = body.get("bot")
        return bot if isinstance(bot, dict) else {}
