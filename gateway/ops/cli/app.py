"""The `feishu-gateway` commands (click). Each one loads the settings once, imports only
what it needs (a read of Redis never imports Celery or the Feishu SDK), and leaves errors to
the boundary in gateway/ops/cli/__init__.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.console import Console

from gateway.chats.scope import chat_of
from gateway.core.errors import GatewayError, Refused
from gateway.core.logs import setup_logging
from gateway.core.settings import load_settings
from gateway.ops.cli import actions, naming, show, views
from gateway.ops.cli.context import Ops, Run
from gateway.ops.cli.post import send
from gateway.ops.cli.sandbox import demo, simulator
from gateway.ops.cli.serve import serve

NOTIFY_BUDGET_S = 15.0
"""How long `purge --notify` keeps trying to send its one line."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("feishu-gateway")
    except PackageNotFoundError:
        return "unknown"


def console() -> Console:
    """Rich on a terminal; plain, unwrapped lines in a pipe (scripts use --json)."""
    tty = sys.stdout.isatty()
    return Console(soft_wrap=True, width=None if tty else 240, no_color=not tty,
                   highlight=False)


def emit(view: Any, as_json: bool, render: Any) -> None:
    if as_json:
        click.echo(json.dumps(view, indent=2, ensure_ascii=False, default=str))
    else:
        render(console(), view)


def ops() -> Ops:
    return Ops(load_settings())


json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print JSON for scripts instead of a table.")
app_option = click.option("--app", default="", metavar="APP_ID",
                          help="With several apps (FEISHU_APPS): the bot whose state of the "
                               "chat is meant (same as CHAT_ID@APP_ID).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="feishu-gateway")
@click.option("--debug", is_flag=True,
              help="Print the traceback of an unexpected error (exit 70) or a system one.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """The Feishu gateway: hold the long connection, and operate the chats it serves.

    Settings come from the environment (or .env); docs/settings.md lists every one."""
    run = ctx.ensure_object(Run)
    run.command, run.debug = ctx.invoked_subcommand, debug


@cli.command()
def listen() -> None:
    """Hold the Feishu long connection(s) and admit messages.

    Reads FEISHU_APP_ID, FEISHU_APP_SECRET (or FEISHU_APPS), FEISHU_DOMAIN, the admission
    settings (FEISHU_*), REDIS_URL, CELERY_BROKER_URL and GATEWAY_METRICS_PORT (a port that
    cannot be bound stops it at start, exit 2)."""
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    if not settings.has_credentials:
        raise GatewayError("FEISHU_APP_ID and FEISHU_APP_SECRET (or FEISHU_APPS) must be set "
                           "for `listen`")
    from gateway.listener.listener_process import run_listener
    from tasks import app

    run_listener(settings, app)


@cli.command()
def sweep() -> None:
    """Re-dispatch stranded chats once (workers also sweep on their own).

    Reads REDIS_URL and CELERY_BROKER_URL."""
    o = ops()
    setup_logging(o.settings.log_level, o.settings.log_format)
    from gateway.chats.sweeper import sweep_once

    if sys.stderr.isatty():
        with Console(stderr=True).status("sweeping every chat whose deadline passed …"):
            swept = sweep_once(o.runtime.store, o.runtime.publisher)
    else:
        swept = sweep_once(o.runtime.store, o.runtime.publisher)
    click.echo(f"re-dispatched {swept} chat(s)")


@cli.command()
@json_option
def status(as_json: bool) -> None:
    """The whole gateway at a glance: Redis, workers and their pools, queue lengths, chats
    running and waiting, each listener's connections, agent caches, undelivered replies.
    Exits 1 (after printing it all) when no worker answered, 2 when the broker is down.

    Reads REDIS_URL and CELERY_BROKER_URL (workers answer within a second)."""
    o = ops()
    from gateway.agents.report import read_reports
    from gateway.core.presence import read_connections

    chats = views.chats_view(o.store, limit=views.CHATS_SCAN_MAX)
    view = {
        "redis": views.redis_view(o.store),
        "workers": _broker_read(lambda: views.worker_view(o.workers())),
        "queues": _broker_read(o.queue_lengths),
        "chats": {"active": chats["total"], "running": chats["running"],
                  "waiting": sum(r["pending"] for r in chats["chats"])},
        "connections": read_connections(o.redis),
        "agents": views.agents_view(read_reports(o.redis)),
        "undelivered": {"count": len(u := o.store.undelivered()), "newest": u[:5]},
    }
    emit(view, as_json, show.status)
    if isinstance(view["workers"], str):
        raise GatewayError(f"cannot read the Celery workers: {view['workers']}")
    if not view["workers"]:
        raise Refused("no Celery worker answered within 1s: turns wait until one runs "
                      "(`celery -A tasks worker`)")


def _broker_read(read: Any) -> Any:
    """A broker read for `status`: its value, or why the broker could not be read."""
    from kombu.exceptions import OperationalError

    try:
        return read()
    except (OperationalError, OSError) as error:
        return f"broker unreachable: {error}"


@cli.command()
@json_option
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1),
              help="Chats a page.")
@click.option("--page", default=1, show_default=True, type=click.IntRange(min=1),
              help="Which page.")
def chats(as_json: bool, limit: int, page: int) -> None:
    """Active chats (a turn runs or messages wait), busiest first, paged.

    Reads REDIS_URL; no broker needed."""
    emit(views.chats_view(ops().store, limit=limit, page=page), as_json, show.chats)


@cli.command()
@json_option
@click.argument("chat_id")
@app_option
@click.option("--first", default=5, show_default=True, type=click.IntRange(min=0),
              help="Waiting messages to list.")
def chat(as_json: bool, chat_id: str, app: str, first: int) -> None:
    """One chat's whole state: its busy mode, its turn (task, since, worker, fence, attempt,
    the messages it merges), waiting messages, lease TTL, session generation and last turns
    with their outcome. With several apps, each bot's state of the chat in turn (--json: a
    list), or one bot's (--app, or CHAT_ID@APP_ID).

    Reads REDIS_URL, GATEWAY_HISTORY_TURNS, GATEWAY_BUSY_MODE and FEISHU_GROUP_RULES; no
    broker needed."""
    o = ops()
    shown = [views.chat_view(o.store, state, first=first,
                             busy_here=o.settings.admission_rules.busy_of(chat_of(state)))
             for state in naming.states(o, chat_id, app)]
    one = len(shown) == 1
    emit(shown[0] if one else shown, as_json, show.chat if one else show.each_chat)


@cli.command()
@click.argument("chat_id")
@app_option
@click.option("--new", is_flag=True, help="Also start a new conversation (as /new).")
def stop(chat_id: str, app: str, new: bool) -> None:
    """Stop a chat's turn exactly as /stop does; the chat's waiting messages go on. With
    several apps, one bot's turn (--app, or CHAT_ID@APP_ID).

    Reads GATEWAY_CANCEL_TIMEOUT, GATEWAY_CANCEL_TERMINATE, REDIS_URL, CELERY_BROKER_URL."""
    o = ops()
    click.echo(actions.stop(o, naming.state(o, chat_id, app), new=new).describe())


@cli.command()
@click.argument("task_id")
@click.option("--terminate", is_flag=True,
              help="Kill the worker process if the turn has not stopped within "
                   "GATEWAY_CANCEL_TIMEOUT (prefork pools).")
def revoke(task_id: str, terminate: bool) -> None:
    """Revoke one turn by its id or its task's id (turn:<chat>:<message>:<fence>).

    A queued turn never runs; a running one is stopped the /stop way. Either way the chat
    goes on with its next message. (`celery -A tasks control revoke` only stops a turn that
    has not started.) Reads GATEWAY_CANCEL_TIMEOUT, REDIS_URL, CELERY_BROKER_URL."""
    click.echo(actions.revoke(ops(), task_id, terminate=terminate).describe())


@cli.command()
@click.argument("target")
@click.argument("message_id", required=False)
@app_option
@click.option("--anyway", is_flag=True, help="Queue it even when no worker answers.")
def retry(target: str, message_id: str | None, app: str, anyway: bool) -> None:
    """Run a failed, stopped or given-up turn again: TURN_ID (or its task's id), or
    CHAT_ID MESSAGE_ID (with several apps, --app or CHAT_ID@APP_ID names the bot).

    The message enters its chat's inbox behind what waits and is answered once. Refused for a
    message that was answered, is unknown, or ended longer ago than GATEWAY_RETRY_RETENTION_S.
    Reads REDIS_URL, CELERY_BROKER_URL, GATEWAY_HISTORY_TURNS."""
    o = ops()
    if message_id is None:
        chat_id, message_id = actions.resolve(o, target)
    else:
        chat_id = naming.state(o, target, app)
    click.echo(actions.retry(o, chat_id, message_id, anyway=anyway))


@cli.command()
@click.argument("chat_id")
@app_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--stop", "and_stop", is_flag=True, help="Stop the chat's turn too.")
@click.option("--notify", is_flag=True,
              help="Tell the chat in one line that its waiting messages were dropped.")
def purge(chat_id: str, app: str, yes: bool, and_stop: bool, notify: bool) -> None:
    """Drop a chat's waiting messages (not its turn's, unless --stop); with several apps,
    one bot's (--app, or CHAT_ID@APP_ID).

    Its users are told nothing unless --notify. Reads REDIS_URL (and, with --stop or
    --notify, CELERY_BROKER_URL and the FEISHU_* credentials)."""
    o = Ops(load_settings(reply_retry_budget_s=NOTIFY_BUDGET_S)) if notify else ops()
    if notify and not o.settings.has_credentials:
        raise GatewayError("--notify sends through Feishu: set FEISHU_APP_ID and "
                           "FEISHU_APP_SECRET (nothing was dropped)")
    chat_id = naming.state(o, chat_id, app)
    held = o.store.lease(chat_id).get("entry")
    entries = [e for e in o.store.pending_entries(chat_id) if e != held]
    if entries and not yes:
        click.confirm(f"Drop {len(entries)} waiting message(s) of chat {chat_id}?",
                      abort=True)
    dropped = actions.purge_with_progress(o, chat_id, entries)
    click.echo(f"chat {chat_id}: {dropped} waiting message(s) dropped")
    if and_stop:
        click.echo(actions.stop(o, chat_id, new=False).describe())
    if notify and dropped:
        click.echo(actions.notify_purged(o, chat_id, entries, dropped))


@cli.command()
@click.argument("role", type=click.Choice(["listener", "worker"]))
def health(role: str) -> None:
    """Exit 0 when this host's listener (every app connected, or served by `serve`) or Celery
    worker (answers a ping within a second) is healthy; else one line and exit 1, whatever
    went wrong (Redis or the broker down too: Docker reserves a healthcheck's exit 2).

    Reads REDIS_URL (listener) or CELERY_BROKER_URL (worker)."""
    import socket

    host = socket.gethostname()
    o = ops()
    if role == "listener":
        from gateway.core.presence import STOPPED, UP_STATES, read_connections

        mine = {owner: c for owner, c in read_connections(o.redis).items()  # (a listener
                if owner.startswith(f"{host}:") and c.get("state") != STOPPED}  # stopped: gone)
        down = sorted(owner.split("|", 1)[-1] for owner, c in mine.items()
                      if c.get("state") not in UP_STATES)
        unknown = sorted(owner.split("|", 1)[-1] for owner, c in mine.items()
                         if c.get("identity_known") is False)
        if not mine or down or unknown:
            raise Refused(f"listener on {host}: " + (
                "no connection reported" if not mine else
                f"not connected: {', '.join(down)}" if down else
                f"bot identity unknown (open API failing?): {', '.join(unknown)}"))
        click.echo(f"listener on {host}: {len(mine)} connection(s) up")
        return
    answered = [name for reply in o.app.control.ping(timeout=1.0) for name in reply
                if name.endswith(f"@{host}")]
    if not answered:
        raise Refused(f"no Celery worker on {host} answered a ping within 1s")
    click.echo(f"worker(s) on {host}: {', '.join(sorted(answered))}")


cli.add_command(serve)
cli.add_command(send)
cli.add_command(simulator)
cli.add_command(demo)
