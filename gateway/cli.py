"""`feishu-gateway`: listen, demo, status, stop, sweep, simulator."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import uuid
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from gateway.errors import GatewayError
from gateway.logs import setup_logging
from gateway.settings import load_settings

if TYPE_CHECKING:
    import redis


def cmd_listen(args: argparse.Namespace) -> int:
    settings = load_settings()
    setup_logging(settings.log_level)
    if not settings.has_credentials:
        raise GatewayError("FEISHU_APP_ID and FEISHU_APP_SECRET (or FEISHU_APPS) must be set "
                           "for `listen`")
    from gateway.dispatch import bound_publishing
    from gateway.service import ListenerService
    from tasks import app

    bound_publishing(app, 2 * settings.redis_timeout_s)
    service = ListenerService(settings, app).start()
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    while not stop.wait(0.5):
        if service.listener.fatal:
            service.stop()
            raise GatewayError(service.listener.fatal)
    service.stop()
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    settings = load_settings()
    setup_logging(settings.log_level)
    from gateway.dispatch import bound_publishing
    from gateway.runtime import Runtime
    from gateway.state.sweeper import sweep_once
    from tasks import app

    bound_publishing(app, 2 * settings.redis_timeout_s)
    rt = Runtime(settings, app, role="cli")
    print(f"re-dispatched {sweep_once(rt.store, rt.publisher)} chat(s)")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    """Exactly what /stop does, from the terminal."""
    settings = load_settings()
    setup_logging("WARNING")
    from gateway.dispatch import bound_publishing
    from gateway.runtime import Runtime
    from tasks import app

    bound_publishing(app, 2 * settings.redis_timeout_s)
    command_id = f"cli:{uuid.uuid4().hex}"
    # an operator means it: no debounce (a user's double tap is what that is for)
    result = Runtime(settings, app, role="cli").canceller.cancel(
        args.chat_id, command_id, new_session=args.new, debounce=False)
    print(result.describe())
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """A chat's state in one command: running turn, lease holder, pending messages, and
    replies that were given up."""
    settings = load_settings()
    from gateway.runtime import Runtime
    from tasks import app

    store = Runtime(settings, app, role="cli").store
    chats = [args.chat_id] if args.chat_id else store.active_chats(args.limit)
    if not chats:
        print("no chat has pending messages")
    now_ms = store.server_ms()
    for chat_id in chats:
        lease, pending = store.lease(chat_id), store.pending(chat_id)
        if lease:
            age_s = (now_ms - int(lease.get("since_ms", now_ms))) / 1000
            requeued = f", published {int(lease['requeues']) + 1} times" if int(
                lease.get("requeues", "0") or 0) else ""
            holder = (f"{lease.get('state')} turn {lease.get('task_id') or '-'} "
                      f"(fence {lease.get('fence')}, worker {lease.get('worker') or '-'}, "
                      f"for {age_s:.1f}s{requeued})")
        else:
            holder = "idle"
        print(f"chat {chat_id}: {holder}; pending {len(pending)}")
        for message_id, message in pending[: args.limit]:
            if message is None:
                print(f"  {message_id}: (unreadable entry)")
            else:
                print(f"  {message_id} from {message.sender_open_id}: {message.text[:60]!r}")
    undelivered = store.undelivered(args.chat_id)
    if undelivered:
        print(f"undelivered replies: {len(undelivered)} (newest first)")
    for record in undelivered[: args.limit]:
        print(f"  {record.get('message_id')} in chat {record.get('chat_id')} "
              f"({record.get('purpose')}): {record.get('error')}")
    if not args.chat_id:
        _print_connections(store.redis)
        _print_agents(store.redis)
    return 0


def _ago(now: float, at: float) -> str:
    return "never" if not at else f"{now - at:.0f}s ago"


def _print_connections(client: redis.Redis) -> None:
    """Each live listener's long connections (gateway/feishu/listener.py)."""
    import time

    from gateway.feishu.listener import read_connections

    connections = read_connections(client)
    if not connections:
        print("connections: no listener reported")
        return
    now = time.time()
    print(f"connections, per listener and app ({len(connections)}):")
    for owner, c in sorted(connections.items()):
        detail = f" ({c['detail']})" if c.get("detail") else ""
        print(f"  {owner}: {c.get('state')} since {_ago(now, float(c.get('since', 0)))}"
              f"{detail}; last frame {_ago(now, float(c.get('last_frame_at', 0)))}, "
              f"last event {_ago(now, float(c.get('last_event_at', 0)))}, "
              f"{c.get('reconnects', 0)} reconnects")


def _print_agents(client: redis.Redis) -> None:
    """Each live worker process's agent cache and releases (gateway/agents/report.py)."""
    import time

    from gateway.agents.report import read_reports, summary

    reports = read_reports(client)
    if not reports:
        print("agents: no worker process reported (none ran a turn yet)")
        return
    print(f"agents, per worker process ({len(reports)}):")
    for owner, record in sorted(reports.items()):
        print(f"  {owner}: {summary(record)} ({time.time() - float(record['at']):.0f}s ago)")


def cmd_simulator(args: argparse.Namespace) -> int:
    setup_logging("INFO")
    from gateway.simulator import serve_forever

    serve_forever(host=args.host, port=args.port)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import run_demo

    return run_demo(chat_id=args.chat)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="feishu-gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("listen", help="hold the Feishu long connection and admit messages"
                   ).set_defaults(func=cmd_listen)
    sub.add_parser("sweep", help="re-dispatch stranded chats once").set_defaults(func=cmd_sweep)
    stop = sub.add_parser("stop", help="stop a chat's running turn, as /stop does")
    stop.add_argument("chat_id")
    stop.add_argument("--new", action="store_true", help="also start a new conversation")
    stop.set_defaults(func=cmd_stop)
    status = sub.add_parser("status", help="a chat's running turn, lease and pending messages")
    status.add_argument("chat_id", nargs="?", help="omit to list chats with pending messages")
    status.add_argument("--limit", type=int, default=20)
    status.set_defaults(func=cmd_status)
    sim = sub.add_parser("simulator", help="run the fake Feishu open platform")
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=9900)
    sim.set_defaults(func=cmd_simulator)
    demo = sub.add_parser("demo", help="everything on embedded defaults, chat from the terminal")
    demo.add_argument("--chat", default="oc_demo_chat", help="the simulated chat id")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except GatewayError as error:
        print(f"feishu-gateway: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
