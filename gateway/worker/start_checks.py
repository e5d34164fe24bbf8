"""Hook: what stops a worker at start, in one line, rather than at its first turn: a bad
GATEWAY_AGENT, or a key layout other than the chat state's. A Redis that cannot be reached
now is waited for, as ever (turns and sweeps retry)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from gateway.agents import load_factory
from gateway.core.errors import GatewayError, SettingsError
from gateway.core.logs import quiet_lark_handler
from gateway.worker.hooks import Hook
from gateway.worker.worker_runtime import WorkerRuntime

logger = logging.getLogger(__name__)


class StartChecks(Hook):
    def __init__(self, runtime: Callable[[], WorkerRuntime]) -> None:
        self._runtime = runtime

    def starting(self) -> None:
        rt = self._runtime()
        try:
            load_factory(rt.settings.agent)
        except SettingsError as error:
            raise SystemExit(f"feishu-gateway: {error}") from None
        quiet_lark_handler()  # an agent's module may have loaded the SDK
        try:
            rt.store.claim_keyspace()
        except SettingsError as error:
            raise SystemExit(f"feishu-gateway: {error}") from None
        except (redis.RedisError, GatewayError) as error:
            logger.warning("cannot check the chat state's key layout now: %s", error)
