"""`feishu-gateway serve`: the listener in webhook mode. Feishu POSTs events and card
callbacks to it (docs/webhook.md); it runs everything `listen` runs but the long
connections and the catch-up, as many replicas as wanted behind a load balancer, beside
`listen` processes or instead of them."""

from __future__ import annotations

import click

from gateway.core.errors import GatewayError
from gateway.core.logs import setup_logging
from gateway.core.settings import load_settings


@click.command()
def serve() -> None:
    """Take Feishu's events and card callbacks by HTTP POST (webhook mode) and admit messages.

    Reads FEISHU_APP_ID, FEISHU_APP_SECRET (or FEISHU_APPS), FEISHU_VERIFICATION_TOKEN,
    FEISHU_ENCRYPT_KEY, FEISHU_WEBHOOK_* (address, port, path, bounds, replay window),
    FEISHU_DOMAIN (the open APIs), the admission settings (FEISHU_*), REDIS_URL,
    CELERY_BROKER_URL and GATEWAY_METRICS_PORT. A port that cannot be bound stops it at
    start (exit 2). The request URL to give Feishu is http(s)://<host>/<FEISHU_WEBHOOK_PATH>,
    for events and card callbacks alike."""
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    if not settings.has_credentials:
        raise GatewayError("FEISHU_APP_ID and FEISHU_APP_SECRET (or FEISHU_APPS) must be set "
                           "for `serve` (replies go through the open APIs)")
    if not settings.verification_token.get_secret_value():
        raise GatewayError("FEISHU_VERIFICATION_TOKEN must be set for `serve`: the app's "
                           "Verification Token (Events and callbacks > Encryption strategy)")
    from gateway.listener.listener_process import run_listener
    from tasks import app

    run_listener(settings, app, webhook=True)
