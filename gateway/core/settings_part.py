"""What each part of `Settings` is: one group of settings, with the title and the page
docs/settings.md shows it under."""

from __future__ import annotations

from typing import ClassVar

from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsPart(BaseSettings):
    """One group of settings; `Settings` inherits every part (gateway/core/settings.py)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True,
                                      use_attribute_docstrings=True)
    doc_title: ClassVar[str] = ""
    """The group's heading in docs/settings.md."""
    doc_link: ClassVar[str] = ""
    """The page (and anchor) that explains the group at length."""
