"""The worker's wiring: the shared collaborators, plus what only a worker runs (agents,
heartbeats, lock handles, the turn runner)."""

from __future__ import annotations

import redis

from gateway.agents import is_stateless, load_factory
from gateway.agents.cache import AgentCache
from gateway.agents.release import ReleaseLane
from gateway.agents.report import EVERY_S, AgentReport
from gateway.approvals.asking import Asker
from gateway.broker.release_post import CeleryPost
from gateway.chats.store_settings import keyspace
from gateway.chats.streams import StreamCards
from gateway.core.lazy import cached_property, locked_cached_property
from gateway.core.loops import Periodic
from gateway.core.model import AgentContext, AgentFactory
from gateway.core.redis_client import redis_client
from gateway.feishu.outbound.typist import Typist
from gateway.runtime import Runtime
from gateway.worker.enricher import Enricher
from gateway.worker.handles import ChatHandles
from gateway.worker.heartbeat import Heartbeater
from gateway.worker.sending import AnswerSender
from gateway.worker.turn_hooks import TurnHook
from gateway.worker.turn_runner import TurnRunner
from gateway.worker.typing_hook import TypingHook


class WorkerRuntime(Runtime):
    @cached_property
    def redis(self) -> redis.Redis:
        """A worker waits a little longer for Redis than a listener (whose ACK answers
        now) or the CLI."""
        return redis_client(self.settings.redis_url, cluster=self.settings.redis_cluster)

    @cached_property
    def factory(self) -> AgentFactory:
        return load_factory(self.settings.agent)

    @property
    def runner_mark(self) -> str:
        """An agent that keeps a session in memory must learn when another process ran a
        turn of its chat."""
        return "" if is_stateless(self.factory) else self.process_id

    @cached_property
    def release_post(self) -> CeleryPost:
        return CeleryPost(self.sender, self.redis, expires_s=self.settings.agent_release_fallback_s)

    @cached_property
    def heartbeats(self) -> Heartbeater:
        s = self.settings
        return Heartbeater(self.store, self.locks, poll_s=min(s.cancel_poll_s, s.lease_ttl_s / 3),
                           time_limit_s=s.turn_time_limit_s, extend_every_s=s.lease_ttl_s / 3)

    @cached_property
    def locks(self) -> ChatHandles:
        return ChatHandles(self.settings.lock_registry_cap)

    @locked_cached_property
    def agents(self) -> AgentCache:
        """This process's agents; their figures go to Redis (and the log) every few seconds."""
        return self._build_agents()

    @cached_property
    def agent_context(self) -> AgentContext:
        """What the agent factory is handed (its builds, its hooks)."""
        return AgentContext(settings=self.settings, redis=self.redis,
                            process_id=self.process_id)

    def _build_agents(self) -> AgentCache:
        s = self.settings
        lane = ReleaseLane(self.process_id, self.release_post,
                           fallback_s=s.agent_release_fallback_s)
        cache = AgentCache(self.factory, s.agent_cache_cap, context=self.agent_context,
                           idle_ttl_s=s.agent_idle_ttl_s, lane=lane)
        report = AgentReport(self.redis, self.process_id, cache.stats)
        self.__dict__["agent_report"] = report
        self.__dict__["agent_reporter"] = Periodic(  # (the first: as its first turn runs)
            "gateway-agent-report", report.step, EVERY_S, first_s=0.5).start()
        return cache

    def close_agents(self) -> None:
        """Worker shutdown: release every agent (bounded) and withdraw the figures."""
        if "agents" not in self.__dict__:
            return  # agents exist only once this process ran a turn
        self.__dict__["agent_reporter"].stop(1.0)
        self.agents.close(self.settings.agent_release_timeout_s)
        self.__dict__["agent_report"].withdraw()

    @locked_cached_property
    def runner(self) -> TurnRunner:
        s = self.settings
        return TurnRunner(
            store=self.store, locks=self.locks, heartbeats=self.heartbeats,
            agents=self.agents, replies=self.replies, publisher=self.publisher,
            sender=AnswerSender(self.store, self.replies, s.reply_format, s.reply_chunk_chars,
                                StreamCards(self.redis, keyspace(s)) if s.streaming else None,
                                s.stream_interval_ms / 1000),
            asker=Asker(self.approvals, self.replies), hooks=self.turn_hooks,
            session_scope=s.session_scope, fetch_max_bytes=s.fetch_max_bytes,
            drain_turns=s.drain_turns, drain_budget_s=s.drain_budget_s)

    @cached_property
    def turn_hooks(self) -> tuple[TurnHook, ...]:
        """The concerns around each turn's agent: what it is shown of a message (quotes,
        forwards), and the "Typing" reaction while it runs (FEISHU_TYPING)."""
        s = self.settings
        if not s.typing:
            return (Enricher(self.replies),)
        return (Enricher(self.replies), TypingHook(Typist(
            self.replies.api_for, emoji=s.typing_emoji, failure_emoji=s.failure_emoji,
            quota=self.quota)))
