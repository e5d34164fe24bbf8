"""A per-process LRU cache of agents, keyed by session; the guard is held only for dict work."""

from __future__ import annotations

import threading
from collections import OrderedDict

from gateway.types import Agent, AgentFactory


class AgentCache:
    def __init__(self, factory: AgentFactory, cap: int) -> None:
        self._factory = factory
        self.cap = cap
        self._agents: OrderedDict[str, Agent] = OrderedDict()
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._agents)

    def get(self, session_key: str) -> Agent:
        """The session's agent, built on first use; least recently used ones drop out."""
        with self._guard:
            agent = self._agents.get(session_key)
            if agent is not None:
                self._agents.move_to_end(session_key)
                return agent
        built = self._factory(session_key)  # outside the guard: a factory may be slow
        with self._guard:
            agent = self._agents.setdefault(session_key, built)
            self._agents.move_to_end(session_key)
            while len(self._agents) > self.cap:
                self._agents.popitem(last=False)
            return agent
