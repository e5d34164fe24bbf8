"""`feishu-gateway demo`: the whole gateway on embedded defaults, talked to from the terminal.

Without REDIS_URL it starts a private redis-server; without FEISHU_APP_ID it starts the
simulator and lets you chat with the bot from stdin. Then one Celery worker and one
listener run as subprocesses, exactly as in production (`celery -A tasks worker`,
`feishu-gateway listen`). With real credentials it serves real Feishu until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

from gateway.embedded_redis import EmbeddedRedis
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


def _chat(sim: object, chat_id: str, lines: TextIO, out: TextIO) -> None:
    """Send each line as a user message; print the bot's replies to it."""
    from gateway.simulator import Simulator

    assert isinstance(sim, Simulator)
    out.write(f"chat {chat_id}: type a message, Ctrl-D to quit\n> ")
    out.flush()
    for line in lines:
        text = line.rstrip("\n")
        if not text.strip():
            out.write("> ")
            out.flush()
            continue
        message_id = sim.send_text(chat_id, text)

        def replies(mid: str = message_id) -> list[str]:
            return [m.text for m in sim.sent_messages(chat_id) if m.reply_to == mid]

        try:
            found = wait_until(replies, REPLY_TIMEOUT_S, "the bot's reply", interval_s=0.1)
            for text_out in found if isinstance(found, list) else []:
                out.write(f"bot: {text_out}\n")
        except TimeoutError:
            out.write(f"(no reply within {REPLY_TIMEOUT_S:.0f}s)\n")
        out.write("> ")
        out.flush()
    out.write("\n")


def run_demo(chat_id: str, lines: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    settings = load_settings()
    workdir = Path(tempfile.mkdtemp(prefix="feishu-gateway-demo-"))
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if "redis_url" not in settings.model_fields_set:
            server = stack.enter_context(EmbeddedRedis())
            env["REDIS_URL"] = server.url
            out.write(f"embedded redis on {server.url}\n")
        sim = None
        if not settings.has_credentials:
            from gateway.simulator import Simulator

            sim = stack.enter_context(Simulator())
            env.update(FEISHU_APP_ID=sim.app_id, FEISHU_APP_SECRET=sim.app_secret,
                       FEISHU_DOMAIN=sim.url, NO_PROXY="127.0.0.1,localhost")
            out.write(f"feishu simulator on {sim.url}\n")
        worker = GatewayProcess("worker", worker_argv("demo", settings.worker_concurrency),
                                env, workdir)
        stack.callback(worker.stop)
        worker.wait_for_log(WORKER_READY, timeout_s=60)
        listener = GatewayProcess("listener", LISTENER_ARGV, env, workdir)
        stack.callback(listener.stop)
        listener.wait_for_log(LISTENER_READY, timeout_s=60)
        out.write(f"worker and listener running; logs in {workdir}\n")
        if sim is not None:
            sim.wait_connected(1, timeout_s=30)
            with contextlib.suppress(KeyboardInterrupt):
                _chat(sim, chat_id, lines, out)
        else:
            stopped = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stopped.set())
            signal.signal(signal.SIGINT, lambda *_: stopped.set())
            out.write("serving Feishu; Ctrl-C to stop\n")
            while not stopped.wait(1):
                pass
    return 0
