"""The Celery reply bot: what a user would write instead of the gateway. Its listener (the
lark-oapi SDK's long connection, `python -m bench.clients celery`) turns each message into
a Celery task, and a worker (`celery -A bench.celery_bot worker`) replies through the
gateway's own open-API client. No order, no dedupe, no recovery: a redelivered event is
answered twice, a killed worker loses its turn, two messages of a chat race.

The broker is REDIS_URL under the product's own Celery settings, as for the gateway."""

from __future__ import annotations

from functools import cache

from celery import Celery

import celeryconfig
from gateway.core.settings import load_settings
from gateway.feishu.outbound.openapi import OpenApi

REPLY = "bench.celery_bot.reply"

app = Celery("bench_celery_bot")
app.config_from_object(celeryconfig)  # (its default queue: the turns queue)


@cache
def _api() -> OpenApi:
    s = load_settings()
    return OpenApi(s.feishu_domain, s.feishu_app_id, s.feishu_app_secret)


@app.task(name=REPLY)
def reply(message_id: str, text: str) -> None:
    _api().reply(message_id, msg_type="text", content={"text": f"echo: {text}"},
                 uuid=f"r-{message_id}")
