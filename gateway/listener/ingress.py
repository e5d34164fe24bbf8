"""Where a listener's events come from: the long connections (`listen`) or the webhook
server (`serve`). Either one feeds the same intake, and the service runs the same duties
(outbox, control desk, sweeper, status board) around it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.core.settings import Settings
from gateway.feishu.webhook.server import Keeper, ServerOptions, WebhookServer
from gateway.feishu.webhook.verify import Keys
from gateway.feishu.ws.connection import ConnectionStatus
from gateway.listener.intake import Intake

logger = logging.getLogger(__name__)


class Ingress(Protocol):
    fatal: str | None

    def start(self) -> object: ...

    def statuses(self) -> list[ConnectionStatus]: ...

    def stop(self) -> None: ...


def webhook_server(settings: Settings, intake: Intake,
                   now_s: Callable[[], float]) -> WebhookServer:
    """The webhook server of `serve`, from its settings (FEISHU_WEBHOOK_*, the app's
    Verification Token and Encrypt Key), feeding `intake` (and the events it refused back to
    it, to take later); `now_s` is the clock its replay window reads."""
    keys = Keys(settings.verification_token.get_secret_value(),
                settings.encrypt_key.get_secret_value(), settings.webhook_max_age_s)
    if not keys.encrypt_key:
        logger.warning("FEISHU_ENCRYPT_KEY is not set: pushes are neither encrypted nor "
                       "signed, and anyone who learns the Verification Token can forge one "
                       "(docs/webhook.md)")
    options = ServerOptions(settings.webhook_addr, settings.webhook_port, settings.webhook_path,
                            settings.webhook_max_body_bytes, settings.webhook_concurrency,
                            settings.ingest_wait_max_ms / 1000, settings.webhook_keepalive_s)
    refused = intake.refused
    return WebhookServer(keys, options, intake.on_push, apps=[a for a, _ in settings.apps],
                         now_s=now_s, keeper=Keeper(refused.keep, refused.__len__,
                                                    intake.take_kept))


def webhook_url(server: WebhookServer) -> str:
    """Where the server listens, for the log line that says it is ready."""
    o = server.options
    host = f"[{o.addr}]" if ":" in o.addr else o.addr
    return f"http://{host}:{server.port}{o.path}"
