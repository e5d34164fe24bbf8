"""Replies to Feishu through the official lark-oapi client, idempotent by `uuid`."""

from __future__ import annotations

import json
import logging
import time
import uuid as uuidlib

import lark_oapi as lark
from lark_oapi.api.im.v1 import ReplyMessageRequest, ReplyMessageRequestBody

from gateway.errors import RejectedError, RetryableError
from gateway.settings import Settings

logger = logging.getLogger(__name__)

RETRYABLE_CODES = {99991400, 99991401, 99991403, 230020, 1000040343}
"""Rate limits and transient server errors; everything else is final."""

_NAMESPACE = uuidlib.UUID("6f1d3c1e-5b0a-4e55-9a51-9d3c8a1f0b7e")


def reply_uuid(message_id: str, purpose: str = "reply") -> str:
    """The same uuid for every attempt to answer one message: Feishu sends it once."""
    return str(uuidlib.uuid5(_NAMESPACE, f"{purpose}:{message_id}"))


def build_client(settings: Settings) -> lark.Client:
    return (
        lark.Client.builder()
        .app_id(settings.feishu_app_id)
        .app_secret(settings.feishu_app_secret.get_secret_value())
        .domain(settings.feishu_domain)
        .timeout(10)
        .log_level(lark.LogLevel.WARNING)
        .build()
    )


class Outbound:
    """Sends what the bot says; one per process, the lark client built on first use."""

    def __init__(self, settings: Settings, attempts: int = 3, backoff_s: float = 0.5) -> None:
        self._settings = settings
        self._client: lark.Client | None = None
        self.attempts = attempts
        self.backoff_s = backoff_s

    @property
    def client(self) -> lark.Client:
        if self._client is None:
            self._client = build_client(self._settings)
        return self._client

    def reply_text(self, message_id: str, text: str, *, uuid: str,
                   in_thread: bool = False) -> str:
        """Reply to `message_id`; retries transient failures with the same uuid."""
        body = (
            ReplyMessageRequestBody.builder()
            .content(json.dumps({"text": text}, ensure_ascii=False))
            .msg_type("text")
            .reply_in_thread(in_thread)
            .uuid(uuid)
            .build()
        )
        request = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        for attempt in range(1, self.attempts + 1):
            try:
                return self._send(request)
            except RetryableError as error:
                if attempt == self.attempts:
                    raise
                logger.warning("reply to %s failed (%s), retry %d", message_id, error, attempt)
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _send(self, request: ReplyMessageRequest) -> str:
        try:
            response = self.client.im.v1.message.reply(request)
        except OSError as error:  # requests' connection errors derive from OSError
            raise RetryableError(f"network: {error}") from error
        if response.success() and response.data is not None:
            return str(response.data.message_id)
        detail = f"code {response.code}: {response.msg}"
        if response.code in RETRYABLE_CODES or (response.raw and response.raw.status_code >= 500):
            raise RetryableError(detail)
        raise RejectedError(detail)
