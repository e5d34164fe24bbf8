"""What a gateway did, as the suites read it: the bot's replies in the simulator, the
scripted agent's events in Redis, an approval card's buttons."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import redis

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.records import SentMessage
from tests.support.agents import events_key


def agent_events(client: redis.Redis, chat_id: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(events_key(chat_id), 0, -1)]


def replies_to(sim: Simulator, chat_id: str) -> dict[str, list[str]]:
    """message_id → texts the bot replied to it with."""
    found: dict[str, list[str]] = defaultdict(list)
    for sent in sim.sent_messages(chat_id):
        if sent.reply_to:
            found[sent.reply_to].append(sent.text)
    return found


def started(client: redis.Redis, chat_id: str, message_id: str) -> bool:
    return any(e["event"] == "start" and e["message_id"] == message_id
               for e in agent_events(client, chat_id))


def reply_of(sim: Simulator, chat_id: str, message_id: str, timeout_s: float = 20) -> str:
    found = wait_until(lambda: replies_to(sim, chat_id).get(message_id), timeout_s,
                       f"a reply to {message_id}")
    assert isinstance(found, list) and len(found) == 1, found
    return str(found[0])


CONFIRMED = ":DONE:"
"""What `command_answer` reads for a command confirmed with a reaction (its card says the
rest)."""


def command_answer(sim: Simulator, chat_id: str, message_id: str,
                   timeout_s: float = 20) -> str:
    """A command's answer: its one reply, or CONFIRMED for a DONE reaction and no reply
    (what it did shows on a card already: said once)."""

    def answered() -> str | None:
        replies = replies_to(sim, chat_id).get(message_id)
        if replies:
            assert len(replies) == 1 and "DONE" not in sim.reactions(message_id), \
                f"said twice: {replies} {sim.reactions(message_id)}"
            return str(replies[0])
        return CONFIRMED if "DONE" in sim.reactions(message_id) else None

    found = wait_until(answered, timeout_s, f"an answer to {message_id}")
    return str(found)


def button(card: SentMessage, decision: str) -> dict[str, Any]:
    for element in card.content["elements"]:
        for action in element.get("actions", ()):
            if action["value"]["decision"] == decision:
                return dict(action["value"])
    raise AssertionError(f"no {decision} button in {card.content}")
