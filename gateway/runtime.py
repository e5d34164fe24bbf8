"""The composition root: builds the collaborators every process shares (Redis, the chat store,
the publisher, replies, approvals, cancelling) from the settings, once. The CLI uses it as it
is; the listener adds its own in gateway/listener/listener_runtime.py, a worker in
gateway/worker/worker_runtime.py."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from concurrent.futures import Executor
from dataclasses import dataclass

import redis

from gateway.approvals.approval_book import ApprovalBook
from gateway.broker.names import TaskSender
from gateway.broker.publisher import BROKER_ERRORS, Publisher
from gateway.chats.cancel import Canceller
from gateway.chats.store import ChatStore
from gateway.chats.store_settings import keyspace, store_config
from gateway.chats.streams import StreamCards
from gateway.core.lazy import cached_property
from gateway.core.redis_client import redis_client
from gateway.core.settings import Settings
from gateway.feishu.outbound.delivery import Replies, RetryPolicy
from gateway.feishu.outbound.openapi import OpenApi
from gateway.feishu.outbound.quota import Quota, Rates
from gateway.orphan_cards import OrphanCards

logger = logging.getLogger(__name__)

@dataclass
class Runtime:
    """What every process shares; the CLI uses it as it is, the listener and the worker
    through their subclasses (gateway/listener/listener_runtime.py,
    gateway/worker/worker_runtime.py)."""

    settings: Settings
    sender: TaskSender

    @cached_property
    def redis(self) -> redis.Redis:
        """Listeners and the CLI answer fast (a dead Redis means ACK 500 now, Feishu
        retries); a worker's waits a little longer (WorkerRuntime)."""
        s = self.settings
        return redis_client(s.redis_url, s.redis_timeout_s, retries=0, cluster=s.redis_cluster)

    def card_closer(self) -> Executor | None:
        """Where the cards of gone turns are closed: at once here (None); the listener has a
        thread of its own, never holding up its control desk."""
        return None

    @cached_property
    def process_id(self) -> str:
        """This process among all workers: host, pid and a nonce (pids are reused)."""
        return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:4]}"

    @cached_property
    def store(self) -> ChatStore:
        return ChatStore(self.redis, store_config(self.settings), keyspace(self.settings),
                         runner=self.runner_mark)

    @property
    def runner_mark(self) -> str:
        """What this process writes as a chat's last runner ("" writes nothing): only workers
        whose agents keep a session in memory need it."""
        return ""

    @cached_property
    def publisher(self) -> Publisher:
        return Publisher(self.sender)

    @cached_property
    def replies(self) -> Replies:
        s = self.settings
        apis = [OpenApi(s.feishu_domain, app_id, secret) for app_id, secret in s.apps]
        first = apis[0] if apis else OpenApi(s.feishu_domain, s.feishu_app_id,
                                             s.feishu_app_secret)
        return Replies(first, RetryPolicy(budget_s=s.reply_retry_budget_s),
                       others={api.app_id: api for api in apis[1:]}, quota=self.quota)

    @cached_property
    def quota(self) -> Quota | None:
        """The send quota shared by every process (None when FEISHU_SEND_RATE_PER_S=0)."""
        s = self.settings
        if not s.send_rate_per_s:
            return None
        return Quota(self.redis, Rates(s.send_rate_per_s, s.send_rate_per_min or 1e9,
                                       s.chat_send_rate_per_s or 1e9))

    def revoke(self, task_id: str, terminate: bool) -> None:
        """Celery's revoke broadcast; terminate kills the pool process (prefork only). Best
        effort: the turn's fence already makes any copy of it a no-op."""
        try:
            self.sender.control.revoke(task_id, terminate=terminate, signal="SIGKILL")
        except BROKER_ERRORS as error:
            logger.warning("revoke of %s not broadcast (%s); its fence makes it a no-op",
                           task_id, error)

    @cached_property
    def orphan_cards(self) -> OrphanCards:
        """Closes the cards of turns a stop found gone (`card_closer`)."""
        return OrphanCards(self.store, StreamCards(self.redis, keyspace(self.settings)),
                           self.replies, executor=self.card_closer())

    @cached_property
    def canceller(self) -> Canceller:
        s = self.settings
        return Canceller(self.store, self.publisher.publish, self.revoke,
                         timeout_s=s.cancel_timeout_s, lease_ttl_ms=s.lease_ttl_ms,
                         debounce_s=s.stop_debounce_s, terminate=s.cancel_terminate,
                         settle=self.orphan_cards.settle)

    @cached_property
    def approvals(self) -> ApprovalBook:
        return ApprovalBook(self.redis, keyspace(self.settings))
