"""The settings of webhook mode (`feishu-gateway serve`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from gateway.core.settings_part import SettingsPart

KEEPALIVE_S = 75.0
"""FEISHU_WEBHOOK_KEEPALIVE_S's default: longer than the senders keep an idle connection
(load balancers and ingress-nginx 60 s, aiohttp 15 s), so they close it first and the server
never closes one as a push is written to it (that push would get no answer and wait for
Feishu's next try)."""


class WebhookSettings(SettingsPart):
    """Feishu's HTTP event subscription: its secrets, the server's address and its bounds."""

    doc_title: ClassVar[str] = "Webhook mode (`serve`)"
    doc_link: ClassVar[str] = "webhook.md"

    verification_token: SecretStr = Field(SecretStr(""),
                                          validation_alias="FEISHU_VERIFICATION_TOKEN")
    """The app's Verification Token (Events and callbacks > Encryption strategy); every push
    must carry it. Needed by `serve`; never printed."""
    encrypt_key: SecretStr = Field(SecretStr(""), validation_alias="FEISHU_ENCRYPT_KEY")
    """The app's Encrypt Key, when one is set: pushes are then decrypted and their
    X-Lark-Signature checked (a plain or unsigned push is refused). Never printed."""
    webhook_max_age_s: float = Field(300.0, validation_alias="FEISHU_WEBHOOK_MAX_AGE_S",
                                     ge=0, le=86_400)
    """A push whose X-Lark-Request-Timestamp is further than this from Redis's clock is
    refused as a replay (0: not checked). Feishu stamps each push, retries included, when it
    sends it."""
    webhook_addr: str = Field("0.0.0.0", validation_alias="FEISHU_WEBHOOK_ADDR", min_length=1)
    """The address `serve` binds (behind a reverse proxy on the same host: 127.0.0.1)."""
    webhook_port: int = Field(8080, validation_alias="FEISHU_WEBHOOK_PORT", ge=1, le=65535)
    """The port `serve` binds."""
    webhook_path: str = Field("/feishu/events", validation_alias="FEISHU_WEBHOOK_PATH")
    """The path of the request URL given to Feishu, for events and card callbacks alike."""
    webhook_max_body_bytes: int = Field(1_048_576,
                                        validation_alias="FEISHU_WEBHOOK_MAX_BODY_BYTES",
                                        ge=4096, le=67_108_864)
    """A bigger request body is refused with 413 (Feishu's events are a few KB)."""
    webhook_keepalive_s: float = Field(KEEPALIVE_S, ge=5, le=3600,
                                       validation_alias="FEISHU_WEBHOOK_KEEPALIVE_S")
    """How long an idle connection is kept open (after its last answer, or since it opened:
    a request head must come whole within it). Keep it longer than whatever sends the pushes
    keeps an idle connection (ingress-nginx and most load balancers: 60 s; Google's: 600 s,
    so 620 there), so the sender always closes first and no push is written to a connection
    being closed."""
    webhook_concurrency: int = Field(8, validation_alias="FEISHU_WEBHOOK_CONCURRENCY",
                                     ge=1, le=256)
    """Pushes whose Redis step runs at once (threads off the event loop); four times as many
    may wait for one, and a push beyond that is answered 503 at once (Feishu retries it)."""

    @field_validator("webhook_path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() for c in value):
            raise ValueError("expected a URL path such as /feishu/events")
        return value
