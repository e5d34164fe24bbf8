"""`feishu-gateway demo`: the whole gateway on embedded defaults, talked to from the terminal.

Without REDIS_URL it starts a private redis-server (a REDIS_URL that is set is checked first);
without FEISHU_APP_ID it starts the simulator and lets you chat with the bot from stdin. Then
one Celery worker and one listener run as subprocesses, exactly as in production
(`celery -A tasks worker`, `feishu-gateway listen`), running the showcase agent unless
GATEWAY_AGENT is set. With real credentials it serves real Feishu until Ctrl-C. When a
process fails to start, the tail of its log is printed and the logs are kept.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from gateway.core.errors import GatewayError
from gateway.core.logs import masked_url
from gateway.core.settings import Settings, load_settings
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    WORKER_READY,
    GatewayProcess,
    StartFailed,
    stop_all,
    wait_ready,
    worker_argv,
)
from gateway.ops.terminal import TerminalChat, gather

if TYPE_CHECKING:
    from gateway.simulator import Simulator

__all__ = ["gather", "run_demo", "script"]

DEMO_AGENT = "showcase"
DEMO_MENU = {"book": ("Book a review", "book"), "chart": ("A chart", "chart"),
             "new": ("New conversation", "/new"), "stop": ("Stop", "/stop")}
"""The simulated bot's menu when FEISHU_MENU is not set: key → (label, what it sends)."""
START_TIMEOUT_S = 60.0
CONNECT_TIMEOUT_S = 30.0
REDIS_CHECK_TIMEOUT_S = 2.0
TAIL_LINES = 30


QUITTING = "stopping the worker and the listener, then Redis …"

def script(name: str) -> str:
    """How to run this Python's console script `name` from another terminal: its bare name
    when the PATH finds this very one; else its path (relative to the current folder when
    under it), or `python -m` when it is not installed here."""
    here = Path(sys.executable).parent  # a venv's bin/ (not resolved: that is the system's)
    path = here / name
    if not path.exists():
        module = {"feishu-gateway": "gateway.ops.cli"}.get(name, name)
        return f"{_shown_path(Path(sys.executable))} -m {module}"
    found = shutil.which(name)
    if found is not None and Path(found).resolve() == path.resolve():
        return name
    return _shown_path(path)


def _shown_path(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


def check_redis(settings: Settings) -> None:
    """A REDIS_URL or Redis broker that was set must answer now: one clear line if not."""
    import redis

    from gateway.core.redis_client import redis_client

    urls = [("REDIS_URL", settings.redis_url)] if "redis_url" in settings.model_fields_set \
        else []
    if settings.celery_broker_url.startswith(("redis://", "rediss://")):
        urls.append(("CELERY_BROKER_URL", settings.celery_broker_url))
    for name, url in urls:
        try:
            with contextlib.closing(redis_client(
                    url, REDIS_CHECK_TIMEOUT_S, retries=0,
                    cluster=settings.redis_cluster and name == "REDIS_URL")) as client:
                client.ping()
        except (redis.RedisError, GatewayError) as error:
            why = str(error).rstrip(".")
            raise GatewayError(
                f"cannot reach Redis at {masked_url(url)} ({name}): {why}; start it, fix "
                f"{name}, or unset it and the demo runs its own") from None


def _remove_unless_kept(workdir: Path, keep: list[bool]) -> None:
    if not keep[0]:
        shutil.rmtree(workdir, True)


def _waiting(out: TextIO, what: str) -> contextlib.AbstractContextManager[object]:
    """A spinner while `what` takes its time, on a terminal only."""
    if not out.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(file=out).status(what + " …")


def _operate(out: TextIO, redis_url: str, sim: Simulator) -> None:
    """What a second terminal needs for every operator's command: the demo's Redis, and its
    simulator's domain and (fake) app credentials, for the commands that call Feishu."""
    gateway, celery = script("feishu-gateway"), script("celery")
    relative = any("/" in s.split()[0] and not Path(s.split()[0]).is_absolute()
                   for s in (gateway, celery))
    where = " in this folder" if relative else ""
    out.write(f"operate it from another terminal{where}: "
              f"export REDIS_URL={masked_url(redis_url)} FEISHU_DOMAIN={sim.url} "
              f"FEISHU_APP_ID={sim.app_id} FEISHU_APP_SECRET={sim.app_secret}\n"
              f"  {gateway} chats | chat <chat_id> | stop | revoke | retry | purge\n"
              f"  FLOWER_UNAUTHENTICATED_API=true {celery} -A tasks flower "
              "--address=127.0.0.1   (then http://127.0.0.1:5555/)\n")


def run_demo(chat_id: str, lines: TextIO = sys.stdin, out: TextIO = sys.stdout, *,
             keep_logs: bool = False, sim_port: int = 0) -> int:
    settings = load_settings()
    check_redis(settings)
    workdir = Path(tempfile.mkdtemp(prefix="feishu-gateway-demo-"))
    keep = [keep_logs]
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(_remove_unless_kept, workdir, keep)
        if "redis_url" not in settings.model_fields_set:
            server = stack.enter_context(EmbeddedRedis())
            env["REDIS_URL"] = server.url
            out.write(f"embedded redis on {server.url}\n")
        if "agent" not in settings.model_fields_set:
            env["GATEWAY_AGENT"] = DEMO_AGENT
        agent = env.get("GATEWAY_AGENT", settings.agent)
        sim = None
        if not settings.has_credentials:
            from gateway.simulator import Simulator

            try:
                sim = stack.enter_context(Simulator(port=sim_port))
            except OSError as error:
                raise GatewayError(f"cannot serve the simulator on port {sim_port} ({error}); "
                                   "--port 0 picks a free one") from None
            env.update(FEISHU_APP_ID=sim.app_id, FEISHU_APP_SECRET=sim.app_secret,
                       FEISHU_DOMAIN=sim.url, NO_PROXY="127.0.0.1,localhost")
            if "menu" not in settings.model_fields_set:
                env["FEISHU_MENU"] = json.dumps({k: v for k, (_, v) in DEMO_MENU.items()})
                sim.menu = [(k, label) for k, (label, _) in DEMO_MENU.items()]
            else:
                sim.menu = list(settings.menu_items.items())
            out.write(f"feishu simulator on {sim.url}\n")
        try:
            with _waiting(out, "starting a Celery worker and a listener"):
                started: list[GatewayProcess] = []
                stack.callback(stop_all, started)
                worker = GatewayProcess("worker", worker_argv("demo", settings.worker_concurrency),
                                        env, workdir)
                started.append(worker)
                listener = GatewayProcess("listener", LISTENER_ARGV, env, workdir)
                started.append(listener)
                wait_ready({worker: WORKER_READY, listener: LISTENER_READY}, START_TIMEOUT_S)
                if sim is not None:
                    try:
                        sim.wait_connected(1, timeout_s=CONNECT_TIMEOUT_S)
                    except TimeoutError:
                        raise StartFailed(listener, "did not connect to the simulator within "
                                                    f"{CONNECT_TIMEOUT_S:g}s") from None
        except StartFailed as failed:
            keep[0] = True
            out.write(f"--- the last lines of {failed.process.log_path} ---\n"
                      f"{failed.process.tail(TAIL_LINES)}\n---\n")
            out.flush()
            raise GatewayError(f"{failed}; its log ends as shown above, and the logs are "
                               f"kept in {workdir}") from None
        kept = "kept" if keep_logs else "removed at exit; --keep-logs keeps them"
        out.write(f"worker and listener running agent {agent!r}; logs in {workdir} "
                  f"({kept})\n")
        if sim is not None:
            out.write(f"web chat: open {sim.url}/ (a direct message, a group and a topic "
                      f"group; cards click). Its chats are not this terminal's: here you "
                      f"talk in {chat_id}, which the web chat does not show\n")
            redis_url = env.get("REDIS_URL", settings.redis_url)
            _operate(out, redis_url, sim)
            with contextlib.suppress(KeyboardInterrupt):
                _chat(sim, chat_id, lines, out, settings, redis_url)
            out.write(f"{QUITTING}\n")  # (what follows takes the processes' stop)
            out.flush()
        else:
            stopped = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
            out.write("serving Feishu; Ctrl-C to stop\n")
            while not stopped.wait(1):
                pass
    return 0


def _chat(sim: Simulator, chat_id: str, lines: TextIO, out: TextIO, settings: Settings,
          redis_url: str) -> None:
    from gateway.chats.history import find_turn, read_history
    from gateway.chats.store_settings import keyspace
    from gateway.core.redis_client import redis_client

    client = redis_client(redis_url)
    keys = keyspace(settings).chat(chat_id)

    def settled(message_id: str, text: str) -> bool:
        """Its turn is recorded; or, for a command (no turn), it was answered; or it was
        taken in (ACKed) and the chat is idle since: nothing of it waits or runs (its
        record may have left the last GATEWAY_HISTORY_TURNS, or a policy dropped it)."""
        if find_turn(read_history(client, keys), message_id) is not None:
            return True
        if text.startswith("/") and any(
                m.reply_to == message_id for m in sim.sent_messages(chat_id)):
            return True
        taken = any(ack.code == 200 for ack in sim.acks_of(message_id))
        return taken and not client.exists(keys.lease) and not client.zcard(keys.inbox)

    TerminalChat(sim, chat_id, out, settled=settled,
                 typing_emoji=settings.typing_emoji).run(lines)
