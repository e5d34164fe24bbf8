"""Agents: `GATEWAY_AGENT` names a factory `factory(session_key) -> Agent`."""

from __future__ import annotations

import importlib

from gateway.core.errors import SettingsError
from gateway.core.model import AgentFactory

BUILTIN = {"echo": "gateway.agents.echo:factory",
           "openai": "gateway.agents.chat_completions:factory",
           "showcase": "gateway.agents.showcase:factory"}


def is_stateless(factory: AgentFactory) -> bool:
    """A factory whose agents keep nothing of a session in memory between turns says so
    (`stateless = True`); for the others each turn start records which process ran it."""
    return getattr(factory, "stateless", False) is True


def load_factory(spec: str) -> AgentFactory:
    """Resolve `echo` or `package.module:callable`; a bad spec is a SettingsError."""
    target = BUILTIN.get(spec, spec)
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SettingsError(
            "bad setting GATEWAY_AGENT: expected 'echo', 'openai', 'showcase' or "
            f"'package.module:factory', got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise SettingsError(
            f"bad setting GATEWAY_AGENT: cannot import {module_name!r} ({error})"
        ) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise SettingsError(f"bad setting GATEWAY_AGENT: {target!r} is not a callable")
    return factory  # type: ignore[no-any-return]
