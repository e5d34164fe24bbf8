"""A turn runner in the test's own process, and a Celery app that records what it publishes."""

from __future__ import annotations

from typing import Any

from celery import Celery
from pydantic import SecretStr

from gateway.agents.cache import AgentCache
from gateway.agents.echo import factory as echo
from gateway.approvals.approval_book import ApprovalBook
from gateway.approvals.asking import Asker
from gateway.broker.publisher import Publisher
from gateway.chats.store import ChatStore
from gateway.feishu.outbound.delivery import Replies, RetryPolicy
from gateway.feishu.outbound.openapi import OpenApi
from gateway.simulator import Simulator
from gateway.worker.handles import ChatHandles
from gateway.worker.heartbeat import Heartbeater
from gateway.worker.sending import AnswerSender
from gateway.worker.turn_runner import TurnRunner
from tests.support.agents import context_for_tests


def runner_for(store: ChatStore, simulator: Simulator, sender: Any,
               **options: Any) -> TurnRunner:
    """A turn runner in this process, echoing, replying through the simulator."""
    locks = ChatHandles(16)
    replies = Replies(OpenApi(simulator.url, simulator.app_id,
                              SecretStr(simulator.app_secret)), RetryPolicy(budget_s=5))
    return TurnRunner(
        store=store, locks=locks,
        heartbeats=Heartbeater(store, locks, poll_s=0.05, time_limit_s=60),
        agents=AgentCache(echo, 8, context=context_for_tests()),
        replies=replies, publisher=Publisher(sender),
        sender=AnswerSender(store, replies, "auto", 4000, None, 0.3),
        asker=Asker(ApprovalBook(store.redis), replies), **options)


class RecordingSender:
    """A Celery app that records what is published (and publishes it for real)."""

    def __init__(self, app: Celery) -> None:
        self.app, self.sent = app, list[str]()
        self.control = app.control

    def send_task(self, name: str, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(kwargs["task_id"])
        return self.app.send_task(name, *args, **kwargs)

    def connection_or_acquire(self, connection: Any = None, pool: bool = True) -> Any:
        return self.app.connection_or_acquire(connection, pool)
