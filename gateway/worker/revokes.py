"""Turns revoked through Celery (`celery -A tasks control revoke`, Flower): a queued one is
dropped and a terminated one stopped, so the chat goes on with its next message instead of
waiting for the revoked turn's lease to run out (Canceller.revoked)."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from gateway.chats.cancel import Canceller
from gateway.core.errors import GatewayError
from gateway.core.forks import ForkGate, fork_gate
from gateway.worker.hooks import Hook

logger = logging.getLogger(__name__)

REVOKE_RETRY_S = 30.0
"""How long a revoke is tried again while Redis fails; after that the turn's lease runs out
and the sweeper runs it again (a queued one is discarded again when re-sent)."""


def kills(signum: Any) -> bool:
    """Whether a terminate with `signum` ended the turn's process: the default SIGTERM or a
    SIGKILL/SIGQUIT. Another signal (SIGUSR1, SIGINT) may leave it running: then the revoke
    counts as a plain one."""
    if signum is None:
        return True
    digits = "".join(ch for ch in str(signum) if ch.isdigit())
    if not digits:
        return True
    return int(digits) in (signal.SIGTERM, signal.SIGKILL, signal.SIGQUIT)


class RevokeLane(Hook):
    """One thread per process applies the revokes, in order: the `task_revoked` handler runs
    on the worker's consumer, which must not wait on Redis, and a mass revoke queues here
    instead of starting a thread each."""

    def __init__(self, canceller: Callable[[], Canceller],
                 gate: Callable[[], ForkGate] = fork_gate) -> None:
        self._canceller = canceller
        self._gate = gate
        self._lanes: dict[int, ThreadPoolExecutor] = {}

    def revoked(self, request: Any, terminated: bool, signum: Any) -> None:
        """Celery's `task_revoked`, for the turn task."""
        kwargs = getattr(request, "kwargs", None) or {}
        chat_id, fence = kwargs.get("chat_id"), kwargs.get("fence")
        if not isinstance(chat_id, str) or not isinstance(fence, int):
            return
        task_id = str(getattr(request, "id", "") or "")
        self._lane().submit(self._apply, chat_id, fence, task_id,
                            bool(terminated) and kills(signum))

    def _lane(self) -> ThreadPoolExecutor:
        pid = os.getpid()
        if pid not in self._lanes:
            self._lanes.clear()
            self._lanes[pid] = ThreadPoolExecutor(1, thread_name_prefix="gateway-revoked")
        return self._lanes[pid]

    def _revoked(self, chat_id: str, fence: int, task_id: str, *, terminated: bool) -> str:
        """One try, a step of the fork gate: the pool may be forking the heir of the process
        the revoke terminated just now."""
        with self._gate().step():
            return self._canceller().revoked(chat_id, fence, task_id, terminated=terminated)

    def _apply(self, chat_id: str, fence: int, task_id: str, terminated: bool) -> None:
        revoked = Retrying(retry=retry_if_exception_type((redis.RedisError, GatewayError)),
                           wait=wait_exponential(multiplier=0.2, max=5.0),
                           stop=stop_after_delay(REVOKE_RETRY_S), reraise=True)
        try:
            line = revoked(self._revoked, chat_id, fence, task_id, terminated=terminated)
        except (redis.RedisError, GatewayError) as error:  # Redis stayed down
            logger.warning("revoke of chat %s's turn not applied to its state (%s); its lease "
                           "runs out and the sweeper runs it again", chat_id, error)
        except Exception:  # the lane's boundary: one line with the traceback, never silent
            logger.exception("revoke of chat %s's turn not applied to its state", chat_id)
        else:
            logger.info("task %s revoked through Celery%s: %s", task_id,
                        " and terminated" if terminated else "", line)
