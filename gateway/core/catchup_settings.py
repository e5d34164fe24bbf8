"""The settings of catch-up: reading back what Feishu no longer pushes after an
outage."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from gateway.core.settings_part import SettingsPart


class CatchupSettings(SettingsPart):
    """How far back and how much a listener reads back after no listener was connected."""

    doc_title: ClassVar[str] = "Catch-up after an outage"
    doc_link: ClassVar[str] = "design.md#catch-up"

    catchup_after_s: float = Field(60.0, validation_alias="FEISHU_CATCHUP_AFTER_S", ge=1,
                                   le=86_400)
    """An app with no connected listener for longer than this (on Redis's clock) is caught
    up when a listener connects again: the messages sent meanwhile, which Feishu no longer
    pushes, are read back from the messages list API (docs/design.md#catch-up)."""
    catchup_window_s: float = Field(21_600.0, validation_alias="FEISHU_CATCHUP_WINDOW_S",
                                    ge=60, le=86_400)
    """Catch-up reads back at most this far, and only chats active within it (an older gap
    is read from this long ago); at most a day, within the dedupe marks' life."""
    catchup_max_chats: int = Field(200, validation_alias="FEISHU_CATCHUP_MAX_CHATS", ge=0,
                                   le=100_000)
    """Catch-up reads at most this many chats, the most recently active first (0: no
    catch-up)."""
    catchup_max_pages: int = Field(20, validation_alias="FEISHU_CATCHUP_MAX_PAGES", ge=1,
                                   le=1000)
    """Catch-up reads at most this many pages of one chat's messages."""
    catchup_page_size: int = Field(50, validation_alias="FEISHU_CATCHUP_PAGE_SIZE", ge=1,
                                   le=50)
    """Messages per page of the messages list API (Feishu allows 50 at most)."""

    @field_validator("catchup_window_s")
    @classmethod
    def _check_window(cls, value: float, info: ValidationInfo) -> float:
        after = info.data.get("catchup_after_s", 60.0)
        if value <= after:
            raise ValueError(f"must be longer than FEISHU_CATCHUP_AFTER_S ({after:g})")
        return value
