"""The settings of the Feishu apps this process serves and the long connection
to each."""

from __future__ import annotations

from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator

from gateway.core.settings_part import SettingsPart

DEFAULT_DOMAIN = "https://open.feishu.cn"


class AppSettings(SettingsPart):
    """The apps' credentials, where Feishu is, how the long connection is kept alive, and
    what a late message gets."""

    doc_title: ClassVar[str] = "Feishu apps and the long connection"
    doc_link: ClassVar[str] = "operating.md#production"

    feishu_app_id: str = Field("", validation_alias="FEISHU_APP_ID")
    """The bot app's id."""
    feishu_app_secret: SecretStr = Field(SecretStr(""), validation_alias="FEISHU_APP_SECRET")
    """The bot app's secret (never printed)."""
    feishu_apps: SecretStr = Field(SecretStr(""), validation_alias="FEISHU_APPS")
    """More apps for one listener: `app_id:app_secret` pairs, comma-separated. With more
    than one app in all, each app's bot keeps its own state of a chat (`<chat_id>@<app_id>`);
    workers and the CLI need the same list."""
    feishu_domain: str = Field(DEFAULT_DOMAIN, validation_alias="FEISHU_DOMAIN")
    """Base of the long-connection endpoint and the open APIs (https://open.larksuite.com
    for Lark, the simulator's address for the simulator)."""
    ws_ping_interval_s: float = Field(30.0, validation_alias="FEISHU_WS_PING_INTERVAL", gt=0)
    """Seconds between pings on the long connection."""
    ws_ping_timeout_s: float = Field(10.0, validation_alias="FEISHU_WS_PING_TIMEOUT", gt=0)
    """A connection with no pong and no data this long after a ping is dead: it is
    closed and rebuilt."""
    late_after_s: float = Field(1800.0, validation_alias="FEISHU_LATE_AFTER_S", ge=0)
    """A message whose create_time is older than this when it arrives is late (0: never)."""
    late_events: Literal["note", "drop"] = Field("note", validation_alias="FEISHU_LATE_EVENTS")
    """What a late message gets: `note` (one reply asking to send it again) or `drop`
    (one log line)."""

    @field_validator("feishu_domain")
    @classmethod
    def _check_domain(cls, value: str) -> str:
        return http_url(value, DEFAULT_DOMAIN)

    @field_validator("feishu_apps")
    @classmethod
    def _check_apps(cls, value: SecretStr) -> SecretStr:
        parse_apps(value.get_secret_value())
        return value

    @property
    def apps(self) -> tuple[tuple[str, SecretStr], ...]:
        """Every app this process serves, (app_id, app_secret): FEISHU_APP_ID first, then
        FEISHU_APPS (an id listed twice counts once)."""
        found: dict[str, SecretStr] = {}
        if self.feishu_app_id and self.feishu_app_secret.get_secret_value():
            found[self.feishu_app_id] = self.feishu_app_secret
        for app_id, secret in parse_apps(self.feishu_apps.get_secret_value()):
            found.setdefault(app_id, SecretStr(secret))
        return tuple(found.items())

    @property
    def primary_app_id(self) -> str:
        """The app a message without an app id belongs to (the first of `apps`)."""
        apps = self.apps
        return apps[0][0] if apps else self.feishu_app_id

    @property
    def has_credentials(self) -> bool:
        return bool(self.apps)


def http_url(value: str, example: str) -> str:
    """An http(s) URL without its trailing slash; ValueError showing `example` (pure)."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL such as {example}")
    return value.rstrip("/")


def id_list(raw: str) -> list[str]:
    """"ou_a, ou_b" -> ["ou_a", "ou_b"] (pure)."""
    return [part.strip() for part in raw.replace(";", ",").split(",") if part.strip()]


def parse_apps(raw: str) -> list[tuple[str, str]]:
    """"cli_a:secret_a,cli_b:secret_b" -> [(id, secret), ...]; ValueError naming the bad
    entry by its position (never its secret)."""
    apps = []
    for index, entry in enumerate(id_list(raw), 1):
        app_id, sep, secret = entry.partition(":")
        if not sep or not app_id.strip() or not secret.strip():
            raise ValueError(f"entry {index} is not app_id:app_secret")
        apps.append((app_id.strip(), secret.strip()))
    return apps
