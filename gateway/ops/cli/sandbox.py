"""The commands that need no Feishu app: the simulator of the open platform, a user's message
sent to it, and the demo (everything on embedded defaults)."""

from __future__ import annotations

import os
import sys

import click

from gateway.core.errors import GatewayError, Refused
from gateway.core.logs import setup_logging
from gateway.core.rules import parse_menu


@click.group(invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9900, show_default=True, type=click.IntRange(0, 65535))
@click.option("--webhook-url", default="", metavar="URL",
              help="POST events to URL (a `feishu-gateway serve`) instead of the long "
                   "connection.")
@click.option("--redelivery", default="15,300,3600,21600", show_default=True,
              metavar="SECONDS",
              help="When an event not answered 200 goes again: each delay after the try "
                   "before it, comma-separated (Feishu's schedule; shorten it to watch it).")
@click.pass_context
def simulator(ctx: click.Context, host: str, port: int, webhook_url: str,
              redelivery: str) -> None:
    """Run the fake Feishu open platform (for demos and tests): it prints the `export` lines
    that point a gateway at it. `simulator send` talks to a running one as a user would."""
    if ctx.invoked_subcommand is not None:
        return
    setup_logging("INFO")
    from gateway.simulator import serve_forever

    try:
        delays = tuple(float(part) for part in redelivery.split(",") if part.strip())
        if not delays or min(delays) <= 0:
            raise ValueError
    except ValueError:
        raise click.BadParameter("expected positive seconds, comma-separated",
                                 param_hint="--redelivery") from None
    try:  # (the bot menu the web chat shows: FEISHU_MENU's keys, each labelled by its text)
        menu = list(parse_menu(os.environ.get("FEISHU_MENU", "")).items())
    except ValueError as error:
        raise GatewayError(f"bad setting FEISHU_MENU: {error}") from None
    try:
        serve_forever(host=host, port=port, webhook_url=webhook_url, redelivery_s=delays,
                      menu=menu)
    except OSError as error:
        raise GatewayError(f"the simulator cannot listen on {host}:{port}: "
                           f"{error.strerror or error}") from None


@simulator.command("send")
@click.argument("chat_id")
@click.argument("text")
@click.option("--url", default="http://127.0.0.1:9900", show_default=True,
              help="The running simulator.")
@click.option("--group", is_flag=True, help="A group chat (default: a direct message).")
@click.option("--mention", is_flag=True, help="@mention the bot (groups gate on it).")
@click.option("--wait", "wait_s", default=30.0, show_default=True,
              help="Seconds to wait for the bot's reply.")
def simulator_send(chat_id: str, text: str, url: str, group: bool, mention: bool,
                   wait_s: float) -> None:
    """Send TEXT to CHAT_ID as a user and print the bot's replies to it, or what the
    simulator saw instead (no bot connected, not acknowledged, no turn started and why)."""
    from gateway.ops.cli.simclient import send_and_wait

    replies = send_and_wait(url, chat_id, text, group=group, mention=mention, wait_s=wait_s)
    for reply in replies.texts:
        click.echo(f"bot: {reply}")
    if replies.unfinished:
        raise Refused(f"the answer was still being written after {wait_s:g}s: above is what "
                      "it said so far (--wait to wait longer)")


@click.command()
@click.option("--chat", "chat_id", default="oc_demo_chat", show_default=True,
              help="The simulated chat id.")
@click.option("--keep-logs", is_flag=True, help="Keep the processes' log folder at exit.")
@click.option("--port", "sim_port", default=9900, show_default=True,
              type=click.IntRange(0, 65535),
              help="The simulator's port, where the web chat is served (0: any free one).")
def demo(chat_id: str, keep_logs: bool, sim_port: int) -> None:
    """Everything on embedded defaults (Redis, simulator, a worker, a listener); chat from
    the terminal, while answers stream. A line ending in \\ goes on with the next; a ```
    block is one message. The worker runs the showcase agent (it streams, asks for
    approval, and `slow` takes 20 s to try /stop) unless GATEWAY_AGENT is set. Reads
    REDIS_URL (checked first) and FEISHU_APP_ID when set (then they are used instead)."""
    from gateway.ops.demo import run_demo

    sys.exit(run_demo(chat_id=chat_id, keep_logs=keep_logs, sim_port=sim_port))
