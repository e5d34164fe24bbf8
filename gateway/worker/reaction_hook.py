"""A worker hands a reaction on one of the bot's answers to the agent factory's optional
`on_reaction(reaction, context)` hook (the `gateway.on_reaction` task, on the low-priority
release queue: outside any chat's order, never holding a chat's lock or a turn's slot).
A factory without the hook is skipped; a hook that raises is one log line (the task is not
run again: a reaction is feedback, not a message to answer).
"""

from __future__ import annotations

import logging
from dataclasses import fields
from typing import Any

from gateway.core.loops import describe
from gateway.core.model import AgentContext, Reaction

logger = logging.getLogger(__name__)


def reaction_of(data: Any) -> Reaction | None:
    """A task's `reaction` argument → Reaction (None when it is not one). Tolerant of
    fields a newer listener adds."""
    if not isinstance(data, dict):
        return None
    known = {f.name: data[f.name] for f in fields(Reaction) if f.name in data}
    try:
        reaction = Reaction(**known)
    except TypeError:
        return None
    return reaction if isinstance(reaction.answer_id, str) and reaction.answer_id else None


def deliver(factory: object, context: AgentContext, data: Any) -> str:
    """Run the factory's hook for the reaction `data`: what happened."""
    hook = getattr(factory, "on_reaction", None)
    if hook is None:
        return "no hook"
    reaction = reaction_of(data)
    if reaction is None:
        logger.warning("on_reaction task dropped: its argument is not a reaction (%.80r)", data)
        return "malformed"
    try:
        hook(reaction, context)
    except Exception as error:  # noqa: BLE001 (the agent's code: one line, the worker goes on)
        logger.error("on_reaction hook failed for %s on %s: %s", reaction.emoji,
                     reaction.answer_id, describe(error))
        return "failed"
    return "delivered"
