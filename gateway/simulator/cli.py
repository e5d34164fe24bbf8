"""Run the simulator standalone: `serve_forever()` blocks until Ctrl-C, SIGTERM or a stop event."""

from __future__ import annotations

import argparse
import logging
import secrets
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import TextIO

from gateway.simulator.config import FEISHU_REDELIVERY_S
from gateway.simulator.simulator import Simulator
from gateway.simulator.webhook import WebhookConfig

logger = logging.getLogger(__name__)


def serve_forever(host: str = "127.0.0.1", port: int = 9900, app_id: str = "cli_sim_app",
                  app_secret: str = "sim-secret", *, bot_open_id: str = "ou_sim_bot",
                  stop_event: threading.Event | None = None,
                  out: TextIO | None = None, webhook_url: str = "",
                  redelivery_s: Sequence[float] = FEISHU_REDELIVERY_S,
                  menu: Sequence[tuple[str, str]] = ()) -> None:
    """Serve until Ctrl-C, SIGTERM (main thread only) or `stop_event` is set.

    Prints where the web chat is, then the `export FEISHU_…=…` lines to paste into the
    terminal that runs the gateway (see `paste_lines`). With `webhook_url`, events are
    POSTed there (signed and encrypted with a fresh Encrypt Key, retried on Feishu's
    schedule) for `feishu-gateway serve`, instead of going over the long connection. An
    event not answered 200 goes again after each of `redelivery_s` (Feishu's schedule).
    `menu`: the bot menu's (event_key, label) items, as the web chat shows them.
    """
    stop = stop_event or threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():

        def _on_term(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        webhook = WebhookConfig(secrets.token_hex(8), secrets.token_hex(16)) \
            if webhook_url else None
        with Simulator(app_id, app_secret, host=host, port=port, bot_open_id=bot_open_id,
                       webhook=webhook, redelivery_s=redelivery_s) as sim:
            sim.menu = list(menu)
            if webhook_url:
                sim.set_webhook_urls([webhook_url])
            print(paste_lines(sim), file=out or sys.stdout, flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                logger.info("interrupted; stopping the simulator")
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def paste_lines(sim: Simulator) -> str:
    """What the simulator prints once it listens: its web chat, and the lines that point a
    gateway at it, ready to paste into another terminal (the secret is the simulator's own,
    a made-up one)."""
    settings = [("FEISHU_APP_ID", sim.app_id), ("FEISHU_APP_SECRET", sim.app_secret),
                ("FEISHU_DOMAIN", sim.url)]
    listener = "listener (`feishu-gateway listen`)"
    if sim.webhook is not None:
        settings += [("FEISHU_VERIFICATION_TOKEN", sim.webhook.verification_token),
                     ("FEISHU_ENCRYPT_KEY", sim.webhook.encrypt_key)]
        listener = "webhook server (`feishu-gateway serve`, at the URL the events go to)"
    exports = "\n".join(f"export {name}={shlex.quote(value)}" for name, value in settings)
    return (f"feishu simulator on {sim.url} (web chat: {sim.url}/, bot open_id "
            f"{sim.bot_open_id})\n"
            f"To point a gateway at it, paste these lines into the terminals of its "
            f"{listener} and workers:\n" + exports)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description="Fake Feishu open platform for local runs")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9900)
    parser.add_argument("--app-id", default="cli_sim_app")
    parser.add_argument("--app-secret", default="sim-secret")
    parser.add_argument("--bot-open-id", default="ou_sim_bot")
    parser.add_argument("--webhook-url", default="",
                        help="POST events to this URL (feishu-gateway serve) instead of "
                             "the long connection")
    parser.add_argument("--redelivery", default=",".join(f"{d:g}" for d in FEISHU_REDELIVERY_S),
                        help="when an event not answered 200 goes again: each delay (s) after "
                             "the try before it, comma-separated (Feishu's schedule)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    try:
        delays = tuple(float(part) for part in args.redelivery.split(",") if part.strip())
        if not delays or min(delays) <= 0:
            raise ValueError
    except ValueError:
        parser.error("--redelivery: expected positive seconds, comma-separated")
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve_forever(args.host, args.port, args.app_id, args.app_secret,
                      bot_open_id=args.bot_open_id, webhook_url=args.webhook_url,
                      redelivery_s=delays)
    except OSError as exc:
        print(f"feishu simulator: cannot listen on {args.host}:{args.port}: {exc}",
              file=sys.stderr)
        return 1
    return 0
