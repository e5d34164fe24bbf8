"""The settings of the `openai` agent."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, SecretStr, field_validator

from gateway.core.app_settings import http_url
from gateway.core.settings_part import SettingsPart


class OpenAISettings(SettingsPart):
    """Its endpoint, key, model, prompt and memory."""

    doc_title: ClassVar[str] = "The `openai` agent"
    doc_link: ClassVar[str] = "agents.md#the-openai-agent"

    openai_base_url: str = Field("https://api.openai.com/v1", validation_alias="OPENAI_BASE_URL")
    """The `openai` agent's OpenAI-compatible endpoint (the openai SDK's own variable)."""
    openai_api_key: SecretStr = Field(SecretStr(""), validation_alias="OPENAI_API_KEY")
    """The `openai` agent's key (never printed)."""
    model: str = Field("gpt-4o-mini", validation_alias="GATEWAY_MODEL", min_length=1)
    """The model name the `openai` agent sends."""
    system_prompt: str = Field("You are a helpful assistant in a Feishu chat.",
                               validation_alias="GATEWAY_SYSTEM_PROMPT")
    """The first message of every request of the `openai` agent."""
    system_prompt_file: str = Field("", validation_alias="GATEWAY_SYSTEM_PROMPT_FILE")
    """When set, the `openai` agent's system prompt is this file's text, read again when the
    file changes (agents then rebuild on every worker process, no restart)."""
    history_messages: int = Field(40, validation_alias="GATEWAY_HISTORY_MESSAGES", ge=0)
    """The `openai` agent keeps this many messages (user and assistant) of a session."""
    history_ttl_s: int = Field(7 * 86_400, validation_alias="GATEWAY_HISTORY_TTL_S", ge=60)
    """The `openai` agent forgets a session's history this long after its last turn."""
    llm_timeout_s: float = Field(120.0, validation_alias="GATEWAY_LLM_TIMEOUT_S", gt=0)
    """The longest wait for the endpoint's next piece of an answer."""

    @field_validator("openai_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return http_url(value, "http://127.0.0.1:8080/v1")
