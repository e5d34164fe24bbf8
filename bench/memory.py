"""RSS of the per-chat state a process keeps, at 10,000 and 1,000,000 distinct chats.

`python -m bench.memory listener|worker` drives the real per-chat code paths of one role
without Redis (parsing and admission decisions for the listener; the lock registry and the
agent cache, at their default caps, for the worker) and prints RSS in MB at each mark.
"""

from __future__ import annotations

import json
import resource
import sys

from gateway.agents import load_factory
from gateway.agents.cache import AgentCache, session_key
from gateway.chats.store_types import TurnRef
from gateway.core.model import AgentContext
from gateway.core.redis_client import redis_client
from gateway.core.settings import load_settings
from gateway.feishu.inbound.events import parse_command, parse_message
from gateway.worker.handles import ChatHandles

MARKS = (10_000, 1_000_000)


def rss_mb() -> float:
    """Current resident set size (Linux /proc), in MB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 1e6


def payload(n: int) -> dict[str, object]:
    return {"schema": "2.0", "header": {"event_id": f"ev{n}",
                                        "event_type": "im.message.receive_v1"},
            "event": {"sender": {"sender_id": {"open_id": f"ou_{n}"}, "sender_type": "user"},
                      "message": {"message_id": f"om_{n:012d}", "chat_id": f"oc_{n:012d}",
                                  "chat_type": "p2p", "message_type": "text",
                                  "create_time": "1700000000000",
                                  "content": json.dumps({"text": f"hello {n}"})}}}


def main(role: str) -> None:
    settings = load_settings()
    locks = ChatHandles(settings.lock_registry_cap)
    context = AgentContext(settings, redis_client(settings.redis_url), "bench:memory")
    agents = AgentCache(load_factory("echo"), settings.agent_cache_cap, context=context)
    out = {}
    for n in range(MARKS[-1]):
        if role == "listener":
            message = parse_message(payload(n), max_text_chars=settings.max_text_chars)
            parse_command(message.text)
        else:
            turn = TurnRef(f"oc_{n:012d}", f"om_{n:012d}", n)
            with locks.hold(turn), agents.hold(session_key(turn.chat_id, 0)):
                pass
        if n + 1 in MARKS:
            out[str(n + 1)] = rss_mb()
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
