"""One frozen settings object, read once from the environment and an optional `.env`: the
parts (`gateway/core/*_settings.py`, one per group of docs/settings.md) put together."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsConfigDict

from gateway.core.access_settings import AccessSettings
from gateway.core.agent_settings import AgentSettings
from gateway.core.app_settings import AppSettings
from gateway.core.busy_settings import BusySettings
from gateway.core.catchup_settings import CatchupSettings
from gateway.core.errors import SettingsError
from gateway.core.greeting_settings import GreetingSettings
from gateway.core.ingest_settings import IngestSettings
from gateway.core.logs import masked_url
from gateway.core.openai_settings import OpenAISettings
from gateway.core.operating_settings import OperatingSettings
from gateway.core.redis_settings import RedisSettings
from gateway.core.reply_settings import ReplySettings
from gateway.core.rules import Rules, parse_group_rules
from gateway.core.settings_part import SettingsPart
from gateway.core.turn_settings import TurnSettings
from gateway.core.webhook_settings import WebhookSettings


class Settings(AppSettings, IngestSettings, WebhookSettings, CatchupSettings, AccessSettings,
               ReplySettings, BusySettings, AgentSettings, OpenAISettings, RedisSettings,
               TurnSettings, OperatingSettings, GreetingSettings):
    """Everything the listener, the workers and the CLI may be configured with."""

    model_config = SettingsConfigDict(
        frozen=True, env_file=".env", extra="ignore", populate_by_name=True,
        use_attribute_docstrings=True,  # each field's docstring is its help (docs/settings.md)
    )

    @property
    def admission_rules(self) -> Rules:
        """Who gets in and what a busy chat does, as the pure admission reads them."""
        return Rules(dm_policy=self.dm_policy, group_policy=self.group_policy,
                     allowed=self.allowed_user_ids, admins=self.admin_ids,
                     require_mention=self.require_mention, mention_all=self.mention_all,
                     allow_bots=self.allow_bots, groups=parse_group_rules(self.group_rules),
                     busy=self.busy_mode)


PARTS: tuple[type[SettingsPart], ...] = tuple(
    part for part in Settings.__bases__ if issubclass(part, SettingsPart))
"""The parts, in the order `Settings` lists them and docs/settings.md shows them."""


def _describe(error: ValidationError) -> str:
    """Turn pydantic's report into one line naming the variable and what it expects."""
    first = error.errors()[0]
    where = str(first["loc"][0]) if first["loc"] else "?"  # the variable, or a field's name
    info = next((info for field, info in Settings.model_fields.items()
                 if where in (field, info.validation_alias)), None)
    alias = info.validation_alias if info is not None else None
    name = alias if isinstance(alias, str) else where.upper()
    got = first.get("input")
    if isinstance(got, str) and "://" in got:
        got = masked_url(got)
    secret = info is not None and info.annotation is SecretStr  # never printed
    shown = "" if secret else f", got {got!r}"
    return f"bad setting {name}: {first['msg']}{shown}"


def load_settings(**overrides: Any) -> Settings:
    """Read the settings once; raise SettingsError with one clear line on a bad value."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None
