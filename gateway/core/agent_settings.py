"""The settings of agents."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gateway.core.settings_part import SettingsPart


class AgentSettings(SettingsPart):
    """Which agent runs, whose conversation it continues, how long it is kept and what
    it may read."""

    doc_title: ClassVar[str] = "Agents"
    doc_link: ClassVar[str] = "agents.md"

    agent: str = Field("echo", validation_alias="GATEWAY_AGENT", min_length=1)
    """The agent: `echo`, `openai`, `showcase` (the demo's) or `package.module:factory`."""
    order_scope: Literal["chat", "thread"] = Field("thread",
                                                   validation_alias="GATEWAY_ORDER_SCOPE")
    """What runs one turn at a time, in order: each thread or topic of a chat apart from the
    rest (`thread`: topics run side by side, and each is a conversation of its own with its
    own /stop and /new), or the whole chat (`chat`). Messages outside any thread keep the
    chat's own queue either way."""
    session_scope: Literal["chat", "user", "thread"] = Field(
        "chat", validation_alias="FEISHU_SESSION_SCOPE")
    """Whose conversation an agent continues: the chat's (under GATEWAY_ORDER_SCOPE=thread a
    topic's own), each user's in a group, or each thread's. With GATEWAY_ORDER_SCOPE=chat,
    turns of one chat run one at a time and /new renews every conversation of the chat."""
    agent_cache_cap: int = Field(256, validation_alias="GATEWAY_AGENT_CACHE_CAP", ge=1)
    """Agents kept per worker process, least recently used out first (one in use
    never)."""
    agent_idle_ttl_s: float = Field(3600.0, validation_alias="GATEWAY_AGENT_IDLE_TTL_S", gt=0)
    """An agent no turn used for this long is let go and released."""
    agent_release_timeout_s: float = Field(10.0, validation_alias="GATEWAY_AGENT_RELEASE_TIMEOUT_S",
                                           ge=0)
    """A worker's warm shutdown waits this long for its agents' releases."""
    agent_release_fallback_s: float = Field(
        30.0, validation_alias="GATEWAY_AGENT_RELEASE_FALLBACK_S", gt=0)
    """An agent whose release task did not come back this soon is released in place."""
    fetch_max_bytes: int = Field(20 * 1024 * 1024, validation_alias="FEISHU_FETCH_MAX_BYTES",
                                 ge=1)
    """`turn.fetch` downloads attachments up to this size."""
    max_text_chars: int = Field(16_000, validation_alias="GATEWAY_MAX_TEXT_CHARS", ge=1)
    """Longer incoming texts are cut, with a `…[truncated]` mark."""
