"""The listener's service: starts and stops what its wiring built (intake, outbox, control
desk, sweeper) around the long connections, and learns the bots' identities."""

from __future__ import annotations

import logging

import redis

from gateway.broker.names import TaskSender
from gateway.core.errors import CredentialsRefused, GatewayError, RetryableError
from gateway.core.logs import masked_url
from gateway.core.loops import Periodic
from gateway.core.redis_clock import RedisClock
from gateway.core.settings import Settings
from gateway.feishu.outbound.openapi import OpenApi
from gateway.feishu.webhook.server import WebhookServer
from gateway.feishu.ws.connection import ConnectionStatus
from gateway.feishu.ws.connections import Connections, StatusBoard
from gateway.listener.catchup.catchup_runner import CatchUpRunner
from gateway.listener.ingress import Ingress, webhook_server, webhook_url
from gateway.listener.listener_runtime import ListenerRuntime

logger = logging.getLogger(__name__)


def fetch_bot_open_id(api: OpenApi) -> str:
    """The bot's open_id, so @mentions of the bot are stripped from the text."""
    try:
        return str(api.bot_info().get("open_id", ""))
    except CredentialsRefused as error:
        raise GatewayError(str(error)) from None
    except (RetryableError, GatewayError) as error:
        logger.warning("bot info unavailable (%s): until it is known, group messages that "
                       "must @mention the bot are not acknowledged (Feishu delivers them "
                       "again); asking again with backoff", error)
        return ""


DROPPING_S = 10.0
"""An app that left a refused event to Feishu (its kept events full) this recently does not
count as connected for catch-up."""
IDENTITY_RETRY_FIRST_S = 1.0
IDENTITY_RETRY_MAX_S = 30.0
"""An unknown bot identity is asked for again after 1 s, doubling up to 30 s."""


def check_durability(client: redis.Redis, mode: str) -> None:
    """GATEWAY_DURABLE_ACK needs a Redis that can do it: say so at start, in one line."""
    if mode == "aof":
        version = str(client.info("server").get("redis_version", "0"))
        if tuple(int(p) for p in version.split(".")[:2]) < (7, 2):
            raise GatewayError(f"GATEWAY_DURABLE_ACK=aof needs Redis >= 7.2 (WAITAOF); this "
                               f"server is {version}: use appendfsync always, or =replica")
    elif mode == "replica":
        replicas = int(client.info("replication").get("connected_slaves", 0))
        if replicas < 1:
            raise GatewayError("GATEWAY_DURABLE_ACK=replica but this Redis has no connected "
                               "replica")


class ListenerService:
    """`webhook`: events come by HTTP (`serve`) instead of the long connections (`listen`);
    no catch-up then, as Feishu retries each push for hours (docs/webhook.md)."""

    def __init__(self, settings: Settings, sender: TaskSender, *,
                 webhook: bool = False) -> None:
        self.settings = settings
        self.runtime = rt = ListenerRuntime(settings, sender)
        self.board: StatusBoard | None = None
        self.catchup: CatchUpRunner | None = None
        self.clock = RedisClock(rt.redis) if webhook else None
        intake = rt.intake
        self.ingress: Ingress = (
            webhook_server(settings, intake, self.clock.now_s) if self.clock
            else Connections(settings, intake.on_frame, on_change=self._changed,
                          batch_handler=intake.on_frames, kept=intake.refused.count,
                          dropped=intake.refused.left_to_feishu))
        self.board = StatusBoard(rt.redis, rt.process_id, self.ingress.statuses)
        if settings.catchup_max_chats > 0 and not webhook:
            self.catchup = rt.catchup(self._connected_apps)
        self.identity = Periodic("gateway-bot-identity", self._learn_identity,
                                 IDENTITY_RETRY_FIRST_S)

    def start(self) -> ListenerService:
        try:
            self.runtime.redis.ping()  # fail at start, in one line, if Redis is not there
            check_durability(self.runtime.redis, self.settings.durable_ack)
            self.runtime.store.claim_keyspace()
            if self.clock is not None:
                self.clock.start()
        except redis.RedisError as error:
            raise GatewayError(f"cannot reach Redis at {masked_url(self.settings.redis_url)}: "
                               f"{error}") from None
        replies = self.runtime.replies
        for app_id, _ in self.settings.apps:
            self._know(app_id, fetch_bot_open_id(replies.api_for(app_id)))
        if not all(self.runtime.intake.bot_open_ids.values()):
            self.identity.start()
        self.runtime.outbox.start()
        self.runtime.desk.start()
        self.runtime.sweeper.start()
        if self.board is not None:
            self.board.start()
        if self.catchup is not None:
            self.catchup.start()
        self.ingress.start()
        apps = ", ".join(app_id for app_id, _ in self.settings.apps)
        if isinstance(self.ingress, WebhookServer):
            logger.info("listening to %s (webhook mode, app %s)", webhook_url(self.ingress),
                        apps)
        else:
            logger.info("listening to %s (app %s)", self.settings.feishu_domain, apps)
        return self

    def _learn_identity(self) -> None:
        """Ask again for the bot identities still unknown (once known, never again: the
        bot info API costs quota)."""
        replies = self.runtime.replies
        for app_id, open_id in list(self.runtime.intake.bot_open_ids.items()):
            if not open_id:
                learnt = fetch_bot_open_id(replies.api_for(app_id))
                if learnt:
                    self._know(app_id, learnt)
                    logger.info("bot identity of app %s known now: %s", app_id, learnt)
        if all(self.runtime.intake.bot_open_ids.values()):
            self.identity.stop(0)
        self.identity.interval_s = min(self.identity.interval_s * 2, IDENTITY_RETRY_MAX_S)

    def _know(self, app_id: str, open_id: str) -> None:
        """The bot identity of `app_id` ('' while unknown), for admission and the status."""
        self.runtime.intake.bot_open_ids[app_id] = open_id
        for status in self.ingress.statuses():
            if status.app_id == app_id:
                status.identity_known = bool(open_id)
                self._changed(status)

    def _changed(self, status: ConnectionStatus) -> None:
        if self.board is not None:
            self.board.changed(status)
        catchup: CatchUpRunner | None = getattr(self, "catchup", None)  # (None while built)
        if catchup is not None:
            catchup.poke()

    def _take_kept(self) -> None:
        refused = self.runtime.intake.refused
        if len(refused):
            try:
                self.runtime.intake.take_kept()
            except Exception as error:  # noqa: BLE001 (a stop goes on; Feishu sends them again)
                logger.warning("refused events not taken at the stop: %s", error)
            if len(refused):
                logger.warning("%d refused event(s) not taken at the stop (Feishu delivers "
                               "them again)", len(refused))

    def _connected_apps(self) -> list[str]:
        """The apps whose listener can take every event now (what catch-up beats for): its
        long connection up, its bot's identity known (else a group @mention cannot be
        judged), none of its refused events left to Feishu lately (past
        FEISHU_INGEST_LATER_CAP). A listener that cannot is no listener: once Feishu gave up
        delivering what it could not take, the gap is read back."""
        refused = self.runtime.intake.refused
        return [s.app_id for s in self.ingress.statuses()
                if s.state == "connected" and s.identity_known
                and not refused.dropping(s.app_id, DROPPING_S)]

    def stop(self) -> None:
        """Close the connections first (no new events), take the events kept to take
        later (one last step), then drain the outbox and the desk."""
        self.ingress.stop()
        self._take_kept()
        if self.catchup is not None:
            self.catchup.stop()
        self.identity.stop()
        if self.clock is not None:
            self.clock.stop()
        if self.board is not None:
            self.board.stop()
        self.runtime.sweeper.stop()
        self.runtime.outbox.stop()
        self.runtime.desk.stop()
        logger.info("listener stopped")
