"""The settings of what a chat does with messages sent while its turn runs."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from gateway.core.rules import BusyMode, busy_mode
from gateway.core.settings_part import SettingsPart


class BusySettings(SettingsPart):
    """The busy mode and its merge window."""

    doc_title: ClassVar[str] = "While a chat's turn runs"
    doc_link: ClassVar[str] = "replies-and-access.md#while-a-chats-turn-runs"

    busy_mode: BusyMode = Field("queue", validation_alias="GATEWAY_BUSY_MODE")
    """What a chat does with messages sent while its turn runs: `queue` (each waits and gets
    its own turn), `merge` (they become one turn, answered once) or `interrupt` (as merge,
    and a new message stops the running turn; the next answers both); see
    docs/replies-and-access.md. FEISHU_GROUP_RULES' `busy` sets it per group."""
    merge_window_ms: int = Field(1500, validation_alias="GATEWAY_MERGE_WINDOW_MS", ge=0,
                                 le=10_000)
    """Busy modes merge and interrupt: a turn of an idle chat starts once its newest message
    is this old (at most 4 times this after its first), so messages typed in quick
    succession join it."""

    @field_validator("busy_mode", mode="before")
    @classmethod
    def _check_busy_mode(cls, value: object) -> BusyMode:
        return busy_mode(value)
