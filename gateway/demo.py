"""`feishu-gateway demo`: the whole gateway on embedded defaults, talked to from the terminal.

Without REDIS_URL it starts a private redis-server; without FEISHU_APP_ID it starts the
simulator and lets you chat with the bot from stdin. Then one Celery worker and one
listener run as subprocesses, exactly as in production (`celery -A tasks worker`,
`feishu-gateway listen`). With real credentials it serves real Feishu until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO

from gateway.embedded_redis import EmbeddedRedis
from gateway.errors import GatewayError
from gateway.logs import masked_url
from gateway.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    WORKER_READY,
    GatewayProcess,
    wait_until,
    worker_argv,
)
from gateway.settings import load_settings

REPLY_TIMEOUT_S = 60.0
FENCE = "```"
CONTINUED = "\\"
HELP = ("type a message and Enter; end a line with \\ to go on with the next one, and a "
        "```fenced block``` (or a paste of one) is one message up to its closing ```; "
        "Ctrl-D quits")


def gather(lines: Iterable[str]) -> Iterator[str]:
    """Terminal lines → messages. A line ending in a backslash goes on with the next line; a
    line opening a ``` fence takes every line up to the closing fence; an empty line alone is
    no message. Layout (indents, blank lines inside) is kept exactly."""
    held: list[str] = []
    fenced = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if fenced:
            held.append(line)
            fenced = not line.strip().startswith(FENCE)
        elif line.strip().startswith(FENCE):
            held.append(line)
            fenced = line.strip().count(FENCE) == 1  # ```x``` on one line is closed already
        elif line.endswith(CONTINUED):
            held.append(line[:-1])
            continue
        else:
            held.append(line)
        if fenced:
            continue
        text = "\n".join(held)
        held = []
        if text.strip():
            yield text
    if held and "\n".join(held).strip():
        yield "\n".join(held)  # Ctrl-D inside a block or after a backslash: sent as it is


def _print_reply(out: TextIO, text: str) -> None:
    """Every line of a reply, in full (a terminal wraps long lines; nothing is cut)."""
    first, *rest = text.split("\n")
    out.write(f"bot: {first}\n")
    for line in rest:
        out.write(f"     {line}\n")


def _chat(sim: object, chat_id: str, lines: TextIO, out: TextIO,
          finished: Callable[[str], bool]) -> None:
    """Send each message; print the bot's replies to it once its turn is over."""
    from gateway.simulator import Simulator

    assert isinstance(sim, Simulator)
    out.write(f"chat {chat_id}: {HELP}\n> ")
    out.flush()
    for text in gather(lines):
        message_id = sim.send_text(chat_id, text)
        try:
            wait_until(functools.partial(finished, message_id), REPLY_TIMEOUT_S,
                       "the bot's turn", interval_s=0.1)
        except TimeoutError:
            out.write(f"(its turn is not over after {REPLY_TIMEOUT_S:.0f}s; what came so far)\n")
        replies = [m.text for m in sim.sent_messages(chat_id) if m.reply_to == message_id]
        for reply in replies:
            _print_reply(out, reply)
        if not replies:
            out.write("(no reply)\n")
        out.write("> ")
        out.flush()
    out.write("\n")


def _waiting(out: TextIO, what: str) -> contextlib.AbstractContextManager[object]:
    """A spinner while `what` takes its time, on a terminal only."""
    if not out.isatty():
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(file=out).status(what + " …")


def run_demo(chat_id: str, lines: TextIO = sys.stdin, out: TextIO = sys.stdout, *,
             keep_logs: bool = False, sim_port: int = 0) -> int:
    settings = load_settings()
    workdir = Path(tempfile.mkdtemp(prefix="feishu-gateway-demo-"))
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if not keep_logs:
            stack.callback(shutil.rmtree, workdir, True)
        if "redis_url" not in settings.model_fields_set:
            server = stack.enter_context(EmbeddedRedis())
            env["REDIS_URL"] = server.url
            out.write(f"embedded redis on {server.url}\n")
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
            out.write(f"feishu simulator on {sim.url}\n")
        with _waiting(out, "starting a Celery worker and a listener"):
            worker = GatewayProcess("worker", worker_argv("demo", settings.worker_concurrency),
                                    env, workdir)
            stack.callback(worker.stop)
            listener = GatewayProcess("listener", LISTENER_ARGV, env, workdir)
            stack.callback(listener.stop)
            worker.wait_for_log(WORKER_READY, timeout_s=60)
            listener.wait_for_log(LISTENER_READY, timeout_s=60)
        kept = "kept" if keep_logs else "removed at exit; --keep-logs keeps them"
        out.write(f"worker and listener running; logs in {workdir} ({kept})\n")
        if sim is not None:
            sim.wait_connected(1, timeout_s=30)
            out.write(f"web chat: open {sim.url}/ (a direct message and a group; cards "
                      "click)\n")
            url = env.get("REDIS_URL", settings.redis_url)
            out.write(f"operate it from another terminal: export REDIS_URL={masked_url(url)}\n"
                      "  feishu-gateway chats | chat <chat_id> | stop | revoke | retry | purge\n"
                      "  FLOWER_UNAUTHENTICATED_API=true celery -A tasks flower "
                      "--address=127.0.0.1   (then http://127.0.0.1:5555/)\n")
            from gateway.clients import keyspace, redis_client
            from gateway.state.history import find_turn, read_history

            client = redis_client(env.get("REDIS_URL", settings.redis_url))
            keys = keyspace(settings).chat(chat_id)

            def finished(message_id: str) -> bool:
                return find_turn(read_history(client, keys), message_id) is not None

            with contextlib.suppress(KeyboardInterrupt):
                _chat(sim, chat_id, lines, out, finished)
        else:
            stopped = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
            out.write("serving Feishu; Ctrl-C to stop\n")
            while not stopped.wait(1):
                pass
    return 0
