"""Loads the chat scripts from `lua/`, expanding `--!include name.lua` lines (once each)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import redis
from redis.commands.core import Script

_INCLUDE = re.compile(r"^--!include (\S+)$", re.MULTILINE)

NAMES = ("ingest", "confirm", "start", "heartbeat", "answer", "complete", "recover", "cancel",
         "due", "ask", "decide", "settle", "refuse", "take", "hold", "retry", "purge", "mark",
         "handback")


def _read(name: str) -> str:
    return resources.files("gateway.chats").joinpath("lua", name).read_text(encoding="utf-8")


@cache
def source(name: str) -> str:
    """The script `name` (without `.lua`) with its includes expanded."""
    seen: set[str] = set()

    def expand(file: str) -> str:
        if file in seen:
            return ""
        seen.add(file)
        return _INCLUDE.sub(lambda m: expand(m.group(1)), _read(file))

    return expand(f"{name}.lua")


def register(client: redis.Redis) -> dict[str, Script]:
    """Every script, registered on `client` (EVALSHA, loaded again after a Redis restart)."""
    return {name: client.register_script(source(name)) for name in NAMES}
