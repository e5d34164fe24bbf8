"""Loads a package's Lua scripts: one file per transition in its `lua/` folder, named after it.

A `--!include name.lua` line expands to that file (once per script), found in the package's
`lua/include/` or, for an include every package shares (clock.lua), in `gateway/core/lua/`:
each include lives in exactly one of them. A script with many settings takes them packed in
one argument, a JSON object its header documents (Lua reads it with `cjson.decode`).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import redis
from redis.commands.core import Script

_INCLUDE = re.compile(r"^--!include (\S+)$", re.MULTILINE)
SHARED = "gateway.core"
"""The package whose `lua/` holds the includes every package shares."""


def _folder(package: str) -> Traversable:
    return resources.files(package).joinpath("lua")


def _include(package: str, name: str) -> str:
    found = [f for f in (_folder(package).joinpath("include", name),
                         _folder(SHARED).joinpath(name)) if f.is_file()]
    if len(found) != 1:
        raise LookupError(f"--!include {name} of {package}: "
                          f"{'in two places' if found else 'not found'}")
    return found[0].read_text(encoding="utf-8")


@cache
def source(package: str, name: str) -> str:
    """The script `name` (without `.lua`) of `package`, with its includes expanded."""
    seen: set[str] = set()

    def expand(text: str) -> str:
        return _INCLUDE.sub(lambda m: included(m.group(1)), text)

    def included(file: str) -> str:
        if file in seen:
            return ""
        seen.add(file)
        return expand(_include(package, file))

    return expand(_folder(package).joinpath(f"{name}.lua").read_text(encoding="utf-8"))


@cache
def names(package: str) -> tuple[str, ...]:
    """The scripts of `package`: every `.lua` file of its `lua/` folder, includes apart."""
    return tuple(sorted(f.name.removesuffix(".lua") for f in _folder(package).iterdir()
                        if f.is_file() and f.name.endswith(".lua")))


def register(client: redis.Redis, package: str) -> dict[str, Script]:
    """Every script of `package`, registered on `client` (EVALSHA, loaded again after a Redis
    restart)."""
    return {name: client.register_script(source(package, name)) for name in names(package)}


def pack(options: dict[str, Any]) -> str:
    """A script's packed argument."""
    return json.dumps(options, separators=(",", ":"))
