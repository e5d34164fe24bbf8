"""The settings of what the bot says on its own (welcomes) and of its menu."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from gateway.core.rules import parse_menu
from gateway.core.settings_part import SettingsPart


class GreetingSettings(SettingsPart):
    """What the bot says on its own when it is added or opened, and what its menu's items do."""

    doc_title: ClassVar[str] = "Welcomes and the bot menu"
    doc_link: ClassVar[str] = "replies-and-access.md"

    welcome_group: str = Field("", validation_alias="FEISHU_WELCOME_GROUP")
    """What the bot says once in a group it was added to (empty: nothing)."""
    welcome_dm: str = Field("", validation_alias="FEISHU_WELCOME_DM")
    """What the bot says once to a user who opens its direct chat for the first time
    (empty: nothing)."""
    menu: str = Field("", validation_alias="FEISHU_MENU")
    """The bot menu's items, JSON: {"<event_key>": "/new" | "/stop" | "<text>"}: a click
    runs the command, or the text as if typed, in the person's direct chat with the bot
    (docs/replies-and-access.md#the-bot-menu). A key not listed is one log line."""

    @field_validator("menu")
    @classmethod
    def _check_menu(cls, value: str) -> str:
        parse_menu(value)
        return value

    @property
    def menu_items(self) -> dict[str, str]:
        """FEISHU_MENU, read: event_key → the command or text a click stands for."""
        return parse_menu(self.menu)
