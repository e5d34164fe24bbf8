"""The lazy listener: one Celery task per turn."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from celery import Task
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    task_revoked,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from gateway.agents import load_factory
from gateway.chats.store import TurnRef
from gateway.chats.sweeper import Sweeper
from gateway.core import metrics
from gateway.core.errors import GatewayError, SettingsError
from gateway.core.logs import dress_handlers, quiet_lark_handler
from gateway.core.names import RELEASE_AGENT, RUN_TURN
from gateway.core.settings import load_settings
from gateway.worker.runtime import WorkerRuntime
from tasks import app

logger = logging.getLogger(__name__)


_built: dict[int, WorkerRuntime] = {}
_building = threading.Lock()


def runtime() -> WorkerRuntime:
    """This process's collaborators, built once per process on first use (a forked pool
    process builds its own; with the threads pool, every thread shares one)."""
    pid = os.getpid()
    if pid not in _built:
        with _building:
            if pid not in _built:
                _built.clear()
                _built[pid] = WorkerRuntime(load_settings(), app)
    return _built[pid]


@after_setup_logger.connect
@after_setup_task_logger.connect
def _dress_logs(logger: logging.Logger, **_: Any) -> None:
    """Celery owns the worker's handlers; we give them our format (GATEWAY_LOG_FORMAT), the
    turn's fields, and keep secrets out of them."""
    dress_handlers(logger, runtime().settings.log_format)
    quiet_lark_handler()


@app.task(name=RUN_TURN, bind=True)
def run_turn(self: Task, chat_id: str, message_id: str, fence: int, sent_ms: int = 0) -> str:
    """Answer the head message of `chat_id` if `fence` still holds its lease. `sent_ms`:
    when it was published (wall clock), for the queue-time metric."""
    if sent_ms:
        metrics.turn_started(time.time() - sent_ms / 1000)
    _watch_for_shutdown()
    return runtime().runner.run(TurnRef(chat_id, message_id, fence),
                                task_id=str(self.request.id), worker=str(self.request.hostname))


@app.task(name=RELEASE_AGENT)
def release_agent(owner: str, token: str, cause: str, session: str = "") -> str:
    """Release an agent the cache of process `owner` let go (low-priority queue). It is
    released in the process that built it, on that process's release lane: here, when this
    task runs there; else the token is handed back to the owner through Redis."""
    rt = runtime()
    if owner == rt.process_id:
        return "released here" if rt.agents.lane.deliver(token) else "released already"
    rt.release_post.hand_back(owner, token)
    return "handed back"


@task_revoked.connect(sender=run_turn)
def _turn_revoked(request: Any = None, terminated: bool = False, signum: Any = None,
                  **_: Any) -> None:
    """A turn revoked through Celery (`celery -A tasks control revoke`, Flower): a queued
    one is dropped and a terminated one stopped, so the chat goes on with its next message
    instead of waiting for the revoked turn's lease to run out (Canceller.revoked). Applied
    on this process's revoke lane: this runs on the worker's consumer, which must not wait
    on Redis."""
    kwargs = getattr(request, "kwargs", None) or {}
    chat_id, fence = kwargs.get("chat_id"), kwargs.get("fence")
    if not isinstance(chat_id, str) or not isinstance(fence, int):
        return
    task_id = str(getattr(request, "id", "") or "")
    _revoke_lane().submit(_apply_revoke, chat_id, fence, task_id,
                          bool(terminated) and _kills(signum))


_lanes: dict[int, ThreadPoolExecutor] = {}
REVOKE_RETRY_S = 30.0
"""How long a revoke is tried again while Redis fails; after that the turn's lease runs out
and the sweeper runs it again (a queued one is discarded again when re-sent)."""


def _revoke_lane() -> ThreadPoolExecutor:
    """One thread per process applies the revokes, in order: a mass revoke queues here
    instead of starting a thread each."""
    pid = os.getpid()
    if pid not in _lanes:
        _lanes.clear()
        _lanes[pid] = ThreadPoolExecutor(1, thread_name_prefix="gateway-revoked")
    return _lanes[pid]


def _kills(signum: Any) -> bool:
    """Whether a terminate with `signum` ended the turn's process: the default SIGTERM or a
    SIGKILL/SIGQUIT. Another signal (SIGUSR1, SIGINT) may leave it running: then the revoke
    counts as a plain one."""
    if signum is None:
        return True
    digits = "".join(ch for ch in str(signum) if ch.isdigit())
    if not digits:
        return True
    return int(digits) in (signal.SIGTERM, signal.SIGKILL, signal.SIGQUIT)


def _apply_revoke(chat_id: str, fence: int, task_id: str, terminated: bool) -> None:
    revoked = Retrying(retry=retry_if_exception_type((redis.RedisError, GatewayError)),
                       wait=wait_exponential(multiplier=0.2, max=5.0),
                       stop=stop_after_delay(REVOKE_RETRY_S), reraise=True)
    try:
        line = revoked(runtime().canceller.revoked, chat_id, fence, task_id,
                       terminated=terminated)
    except (redis.RedisError, GatewayError) as error:  # Redis stayed down
        logger.warning("revoke of chat %s's turn not applied to its state (%s); its lease "
                       "runs out and the sweeper runs it again", chat_id, error)
    except Exception:  # the lane's boundary: one line with the traceback, never silent
        logger.exception("revoke of chat %s's turn not applied to its state", chat_id)
    else:
        logger.info("task %s revoked through Celery%s: %s", task_id,
                    " and terminated" if terminated else "", line)


@worker_init.connect
def _serve_metrics(**_: Any) -> None:
    """The host's `/metrics` (GATEWAY_WORKER_METRICS_PORT), before the pool forks."""
    settings = runtime().settings
    if settings.worker_metrics_port:
        metrics.serve_worker(settings.worker_metrics_port, settings.metrics_addr,
                             settings.prometheus_multiproc_dir)


@worker_init.connect
def _check_agent(**_: Any) -> None:
    """A bad GATEWAY_AGENT stops the worker at start, in one line, not at the first turn."""
    try:
        load_factory(runtime().settings.agent)
    except SettingsError as error:
        raise SystemExit(f"feishu-gateway: {error}") from None


@worker_init.connect
def _check_keyspace(**_: Any) -> None:
    """A worker whose key layout differs from the chat state's stops at start, in one line.
    A Redis that cannot be reached now is waited for, as ever (turns and sweeps retry)."""
    try:
        runtime().store.claim_keyspace()
    except SettingsError as error:
        raise SystemExit(f"feishu-gateway: {error}") from None
    except (redis.RedisError, GatewayError) as error:
        logger.warning("cannot check the chat state's key layout now: %s", error)


_notice_read, _notice_write = os.pipe()
"""Warm shutdown, told by the worker's main process to every process running turns (its
pool processes, forked after this import, share the pipe): it writes a byte for each, and
each one's watcher takes one."""
os.set_blocking(_notice_write, False)
NOTICE_BYTES = 4096
"""More than a worker has processes; one write of it is atomic (PIPE_BUF)."""
GREEN_POOLS = {"gevent", "eventlet"}
"""Pools under which no watcher runs (a warm shutdown then waits for the replies' retries,
as it waits for running turns)."""
_watchers: dict[int, threading.Thread] = {}
_watching = threading.Lock()


@worker_shutting_down.connect
def _tell_shutdown(**_: Any) -> None:
    """SIGTERM (or SIGINT, SIGQUIT) reached the worker's main process: in its signal
    handler, so only one write, never a lock."""
    with contextlib.suppress(OSError):  # the pipe is full: told already
        os.write(_notice_write, b"!" * NOTICE_BYTES)


def _watch_for_shutdown() -> None:
    """Start this process's watcher once, at its first turn (a forked pool process starts
    its own)."""
    if GREEN_POOLS & sys.modules.keys():
        return  # a green thread blocked in os.read would hold the whole process
    pid = os.getpid()
    if pid not in _watchers:
        with _watching:
            if pid not in _watchers:
                _watchers.clear()
                _watchers[pid] = threading.Thread(target=_await_shutdown, daemon=True,
                                                  name="gateway-shutdown")
                _watchers[pid].start()


def _await_shutdown() -> None:
    """Replies stop being retried; a turn that waits to retry one is handed back at once,
    so the worker leaves within its stop grace period (TurnRunner.leave)."""
    try:
        os.read(_notice_read, 1)
    except OSError as error:
        logger.warning("shutdown notices cannot be read in this process: %s", error)
        return
    logger.info("worker shutting down: replies are no longer retried; unsent ones are "
                "handed back to other workers")
    try:
        runtime().runner.leave()
    except Exception:  # the boundary of a thread: its turns then end as they would have
        logger.exception("cannot stop retrying replies at shutdown")


_sweepers: list[Sweeper] = []


@worker_ready.connect
def _start_sweeper(**_: Any) -> None:
    """Workers sweep too, so crashed turns heal even while no listener runs."""
    rt = runtime()
    sweeper = Sweeper(rt.store, rt.publisher, rt.settings.sweep_interval_s)
    _sweepers.append(sweeper)
    sweeper.start()


@worker_process_shutdown.connect  # each prefork pool process, before it exits
@worker_shutdown.connect  # the main process (with the threads pool, turns ran here)
def _release_agents(**_: Any) -> None:
    """Warm shutdown: every agent this process built is released, within a bounded time."""
    metrics.process_ended(os.getpid())
    built = _built.get(os.getpid())
    if built is not None:
        try:
            built.close_agents()
        except redis.RedisError as error:
            logger.warning("agent figures of this process not withdrawn: %s", error)


@worker_shutdown.connect
def _stop_sweeper(**_: Any) -> None:
    while _sweepers:
        _sweepers.pop().stop()
