"""Agents: `GATEWAY_AGENT` names a factory, loaded here once per process.

A factory is called `factory(session_key, context)` (see `AgentFactory`), and its optional
`signature(context)` likewise. Each may be written without the context instead:
`factory(session_key)` (a function, or an agent class whose `__init__` takes the session
key) and `signature()`. Which form a hook is written in is read from its parameters once,
at load: one that can be called without the context is called so."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from gateway.core.errors import SettingsError
from gateway.core.model import Agent, AgentContext, AgentFactory

BUILTIN = {"echo": "gateway.agents.echo:factory",
           "openai": "gateway.agents.chat_completions:factory",
           "showcase": "gateway.agents.showcase:factory"}


def is_stateless(factory: object) -> bool:
    """A factory whose agents keep nothing of a session in memory between turns says so
    (`stateless = True`); for the others each turn start records which process ran it."""
    return getattr(factory, "stateless", False) is True


def wants_context(hook: Callable[..., Any], *before: str, name: str) -> bool:
    """Whether `hook` takes the context after the arguments named `before`: False when it
    can be called without it; SettingsError when it can be called neither way. A hook whose
    parameters cannot be read (a builtin) is called without it, as hooks always were."""
    try:
        parameters = inspect.signature(hook)
    except (TypeError, ValueError):
        return False
    for wanted in (False, True):
        try:
            parameters.bind(*before, *(("context",) if wanted else ()))
        except TypeError:
            continue
        return wanted
    raise SettingsError(f"bad setting GATEWAY_AGENT: {name}{parameters} can be called neither "
                        f"as ({', '.join((*before, 'context'))}) nor as ({', '.join(before)})")


class AdaptedFactory:
    """A factory whose call or `signature` is written without the context, called as an
    `AgentFactory`: the hook written so is called without it. Says `stateless` as the
    factory does."""

    def __init__(self, factory: Callable[..., Agent], *, build_wants: bool,
                 signature: Callable[..., str] | None, signature_wants: bool) -> None:
        self.factory = factory
        self.stateless = is_stateless(factory)
        self._build_wants = build_wants
        self._signature = signature
        self._signature_wants = signature_wants

    def __call__(self, session_key: str, context: AgentContext) -> Agent:
        if self._build_wants:
            return self.factory(session_key, context)
        return self.factory(session_key)

    def signature(self, context: AgentContext) -> str:
        if self._signature is None:
            return ""
        return self._signature(context) if self._signature_wants else self._signature()

    def __repr__(self) -> str:
        return f"AdaptedFactory({self.factory!r})"


def as_factory(found: Callable[..., Agent], name: str = "factory") -> AgentFactory:
    """`found` callable as an `AgentFactory`: itself when it and its `signature` take the
    context, else adapted."""
    build_wants = wants_context(found, "session_key", name=name)
    hook = getattr(found, "signature", None)
    signature = hook if callable(hook) else None
    signature_wants = signature is None or wants_context(signature, name=f"{name}.signature")
    if build_wants and signature_wants:
        return found
    return AdaptedFactory(found, build_wants=build_wants, signature=signature,
                          signature_wants=signature_wants)


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
    return as_factory(factory, target)
