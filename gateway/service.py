"""The listener process: long connection, intake, outbox and sweeper, run together."""

from __future__ import annotations

import json
import logging

import lark_oapi as lark
import redis
from lark_oapi.core.exception import ObtainAccessTokenException

from gateway.control import ControlDesk
from gateway.dispatch import TaskSender
from gateway.errors import GatewayError
from gateway.feishu.listener import Listener
from gateway.feishu.outbound import build_client
from gateway.intake import Intake
from gateway.logs import masked_url
from gateway.outbox import Outbox
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.sweeper import Sweeper

logger = logging.getLogger(__name__)


def fetch_bot_open_id(settings: Settings) -> str:
    """The bot's open_id, so @mentions of the bot are stripped from the text."""
    request = (lark.BaseRequest.builder().http_method(lark.HttpMethod.GET)
               .uri("/open-apis/bot/v3/info").token_types({lark.AccessTokenType.TENANT})
               .build())
    try:
        response = build_client(settings).request(request)
        body = json.loads(response.raw.content) if response.raw else {}
    except ObtainAccessTokenException as error:
        raise GatewayError(f"feishu refused the app credentials: {error}") from None
    except (OSError, ValueError) as error:
        logger.warning("bot info unavailable (%s); @mentions of the bot stay in the text", error)
        return ""
    return str((body.get("bot") or {}).get("open_id", ""))


class ListenerService:
    def __init__(self, settings: Settings, sender: TaskSender) -> None:
        self.settings = settings
        self.runtime = Runtime(settings, sender)
        self.outbox = Outbox()
        self.desk = ControlDesk(self.runtime.canceller, self.runtime.outbound)
        self.intake = Intake(self.runtime.store, self.runtime.publisher, self.outbox, self.desk,
                             max_text_chars=settings.max_text_chars)
        self.listener = Listener(settings, self.intake.accept)
        self.sweeper = Sweeper(self.runtime.store, self.runtime.publisher,
                               settings.sweep_interval_s)

    def start(self) -> ListenerService:
        try:
            self.runtime.redis.ping()  # fail at start, in one line, if Redis is not there
        except redis.RedisError as error:
            raise GatewayError(f"cannot reach Redis at {masked_url(self.settings.redis_url)}: "
                               f"{error}") from None
        self.intake.bot_open_id = fetch_bot_open_id(self.settings)
        self.outbox.start()
        self.sweeper.start()
        self.listener.start()
        logger.info("listening to %s (app %s)", self.settings.feishu_domain,
                    self.settings.feishu_app_id)
        return self

    def stop(self) -> None:
        """Close the connection first (no new events), then drain the outbox."""
        self.listener.stop()
        self.sweeper.stop()
        self.outbox.stop()
        self.desk.stop()
        logger.info("listener stopped")
