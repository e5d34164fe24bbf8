"""`feishu-gateway`: the listener, the demo, and the operator's commands (status, chats,
chat, stop, revoke, retry, purge, sweep, simulator).

This module is the commands' one error boundary: a refused request (unknown chat, a turn
that is over) exits 1, a bad setting or an unreachable Redis or broker exits 2, each with one
line on stderr and no traceback. May import: anything of the gateway (lazily)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
import redis
from redis.exceptions import RedisClusterException

from gateway.errors import GatewayError, Refused

PROG = "feishu-gateway"


def _say(line: str) -> None:
    click.echo(f"{PROG}: {line}", err=True)


def _redis_url() -> str:
    from gateway.logs import masked_url
    from gateway.settings import load_settings

    try:
        return masked_url(load_settings().redis_url)
    except GatewayError:
        return "REDIS_URL"


def _broker_error(error: BaseException) -> bool:
    kombu_errors = sys.modules.get("kombu.exceptions")
    return kombu_errors is not None and isinstance(error, kombu_errors.OperationalError)


def main(argv: Sequence[str] | None = None) -> int:
    from gateway.cli.app import cli

    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name=PROG,
                          standalone_mode=False)
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
    except Exception as error:
        if _broker_error(error):
            _say(f"cannot reach the Celery broker ({error}); is it running, and is "
                 "CELERY_BROKER_URL (or REDIS_URL) right?")
            return 2
        raise
