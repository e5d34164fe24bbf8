"""Loading GATEWAY_AGENT's factory: each form docs/agents.md accepts is called with what it
takes, told apart once at load, and the agent cache hands every build (and `signature`)
the process's context."""

from __future__ import annotations

import pytest

from gateway.agents import AdaptedFactory, is_stateless, load_factory
from gateway.agents.cache import AgentCache
from gateway.agents.chat_completions import ChatCompletionsAgent
from gateway.core.errors import SettingsError
from gateway.core.model import AgentContext, Turn
from tests.support.agents import context_for_tests

CONTEXT = context_for_tests()


class SessionAgent:
    """An agent class used as the factory, written without the context."""

    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self.context: AgentContext | None = None

    def run(self, turn: Turn) -> str:
        return turn.text


class ContextAgent(SessionAgent):
    """An agent class used as the factory, taking the context."""

    def __init__(self, session_key: str, context: AgentContext) -> None:
        super().__init__(session_key)
        self.context = context


def with_context(session_key: str, context: AgentContext) -> SessionAgent:
    return ContextAgent(session_key, context)


def session_only(session_key: str) -> SessionAgent:
    return SessionAgent(session_key)


def context_optional(session_key: str, context: AgentContext | None = None) -> SessionAgent:
    agent = SessionAgent(session_key)
    agent.context = context
    return agent


def context_by_keyword(session_key: str, *, context: AgentContext) -> SessionAgent:
    return ContextAgent(session_key, context)


class SessionOnlyConfigured:
    """A factory object written without the context, its `signature()` likewise."""

    stateless = True

    def __call__(self, session_key: str) -> SessionAgent:
        return SessionAgent(session_key)

    def signature(self) -> str:
        return "v1"


class MixedConfigured:
    """Its call takes the context, its `signature()` does not."""

    def __call__(self, session_key: str, context: AgentContext) -> SessionAgent:
        return ContextAgent(session_key, context)

    def signature(self) -> str:
        return "v2"


class Configured(MixedConfigured):
    def signature(self, context: AgentContext) -> str:  # type: ignore[override]
        return f"built in {context.process_id}"


session_only_configured = SessionOnlyConfigured()
mixed_configured = MixedConfigured()
configured = Configured()


def built_by(name: str) -> SessionAgent:
    cache = AgentCache(load_factory(f"{__name__}:{name}"), 4, context=CONTEXT)
    with cache.hold("oc_1#0") as agent:
        assert isinstance(agent, SessionAgent)
        return agent


@pytest.mark.parametrize(("name", "handed"), [
    ("with_context", True), ("ContextAgent", True), ("mixed_configured", True),
    ("configured", True), ("session_only", False), ("SessionAgent", False),
    ("session_only_configured", False), ("context_optional", False),
])
def test_each_form_is_called_with_what_it_takes(name: str, handed: bool) -> None:
    agent = built_by(name)
    assert agent.session_key == "oc_1#0"
    assert agent.context is (CONTEXT if handed else None)


def test_a_factory_that_takes_the_context_is_loaded_as_it_is() -> None:
    assert load_factory(f"{__name__}:with_context") is with_context
    assert load_factory(f"{__name__}:configured") is configured
    for builtin in ("echo", "showcase", "openai"):
        assert not isinstance(load_factory(builtin), AdaptedFactory)


def test_signature_and_stateless_are_read_in_either_form() -> None:
    for name, signature, stateless in (("session_only_configured", "v1", True),
                                       ("mixed_configured", "v2", False),
                                       ("configured", "built in test:0:0000", False),
                                       ("session_only", "", False)):
        factory = load_factory(f"{__name__}:{name}")
        cache = AgentCache(factory, 4, context=CONTEXT)
        assert cache.signature() == signature and cache.stats()["signature"] == signature
        assert is_stateless(factory) is stateless, name


def test_a_factory_callable_neither_way_is_a_bad_setting() -> None:
    with pytest.raises(SettingsError, match="bad setting GATEWAY_AGENT: .*context_by_keyword"
                                            r".*neither as \(session_key, context\)"):
        load_factory(f"{__name__}:context_by_keyword")


def test_the_openai_agent_keeps_its_history_through_the_context_s_redis() -> None:
    factory = load_factory("openai")
    agent = AgentCache(factory, 4, context=CONTEXT)
    with agent.hold("oc_1#0") as built:
        assert isinstance(built, ChatCompletionsAgent)
        assert built.history._redis is CONTEXT.redis
        assert built.config.model == CONTEXT.settings.model
    assert len(agent.signature()) == 12
