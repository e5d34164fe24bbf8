"""`feishu-gateway`: the listener, the demo, and the operator's commands (status, chats,
chat, stop, revoke, retry, purge, sweep, simulator).

This module is the commands' one error boundary: a refused request (unknown chat, a turn
that is over) exits 1; a bad setting or argument (one that is not UTF-8), an unreachable
Redis or broker, or the system refusing (a port in use, a missing folder, a permission)
exits 2; anything else is a bug and exits 70
(EX_SOFTWARE), its traceback printed only with `--debug`. Each is one line on stderr.
`health` exits 1 for every unhealthy case: Docker reserves a healthcheck's exit 2.
It imports the rest of the gateway lazily."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

import click
import redis
from redis.exceptions import RedisClusterException

from gateway.core.errors import GatewayError, Refused
from gateway.ops.cli.context import Run

PROG = "feishu-gateway"
BUG_EXIT = 70
"""EX_SOFTWARE (sysexits.h): an exception no command expects."""
HEALTH = "health"
"""The healthcheck command: any failure of it exits 1 (Docker: "2: reserved")."""


def _say(line: str) -> None:
    click.echo(f"{PROG}: {line}", err=True)


def _redis_url() -> str:
    from gateway.core.logs import masked_url
    from gateway.core.settings import load_settings

    try:
        return masked_url(load_settings().redis_url)
    except GatewayError:
        return "REDIS_URL"


def _broker_error(error: BaseException) -> bool:
    kombu_errors = sys.modules.get("kombu.exceptions")
    return kombu_errors is not None and isinstance(error, kombu_errors.OperationalError)


def main(argv: Sequence[str] | None = None) -> int:
    run = Run()
    code = _run(run, argv)
    return 1 if run.command == HEALTH and code not in (0, 1) else code


def _not_utf8(args: Sequence[str]) -> str | None:
    """The line refusing the first argument that holds bytes UTF-8 cannot (the shell passed
    them; Python keeps them as lone surrogates, which no id, Redis key or log line carries)."""
    for n, arg in enumerate(args, start=1):
        try:
            arg.encode()
        except UnicodeEncodeError:
            shown = ascii(arg.encode(errors="surrogateescape"))[2:-1]
            return f"argument {n} ('{shown}') is not UTF-8 text: no chat, app, message or " \
                   "turn id is"
    return None


def _run(run: Run, argv: Sequence[str] | None) -> int:
    from gateway.ops.cli.app import cli

    args = list(argv) if argv is not None else sys.argv[1:]
    refusal = _not_utf8(args)
    if refusal is not None:
        _say(refusal)
        return 2
    try:
        result = cli.main(args=args, prog_name=PROG, standalone_mode=False, obj=run)
        return int(result or 0)
    except click.exceptions.Abort:
        _say("aborted (`feishu-gateway chat <chat_id>` shows where things stand)")
        return 1
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as error:
        error.show()
        return int(error.exit_code)
    except Refused as error:
        _say(str(error))
        return 1
    except GatewayError as error:
        _say(str(error))
        return 2
    except (redis.ConnectionError, redis.TimeoutError, RedisClusterException) as error:
        _say(f"cannot reach Redis at {_redis_url()} ({error}); is it running, and is "
             "REDIS_URL right?")
        return 2
    except redis.RedisError as error:
        _say(f"Redis answered with an error: {error}")
        return 2
    except OSError as error:  # the system said no: a port in use, a missing file, a permission
        _traceback(run)
        _say(f"{type(error).__name__}: {error}")
        return 2
    except Exception as error:  # noqa: BLE001  (the boundary: a bug is one line, exit 70)
        if _broker_error(error):
            _say(f"cannot reach the Celery broker ({error}); is it running, and is "
                 "CELERY_BROKER_URL (or REDIS_URL) right?")
            return 2
        _traceback(run)
        _say(f"unexpected {type(error).__name__}: {error} (a bug; `{PROG} --debug "
             f"{run.command or '<command>'} …` prints its traceback)")
        return BUG_EXIT


def _traceback(run: Run) -> None:
    """The traceback of the exception being handled, on stderr, with `--debug` only."""
    if run.debug:
        traceback.print_exc()
