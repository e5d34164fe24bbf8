"""The settings of who gets in."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from gateway.core.app_settings import id_list
from gateway.core.rules import DmPolicy, GroupPolicy, parse_group_rules
from gateway.core.settings_part import SettingsPart


class AccessSettings(SettingsPart):
    """Who may talk to the bot, in direct messages and in groups, and who is an admin."""

    doc_title: ClassVar[str] = "Who gets in"
    doc_link: ClassVar[str] = "replies-and-access.md#who-gets-in"

    dm_policy: DmPolicy = Field("open", validation_alias="FEISHU_DM_POLICY")
    """Who may talk to the bot in a direct message."""
    group_policy: GroupPolicy = Field("open", validation_alias="FEISHU_GROUP_POLICY")
    """Who may talk to the bot in a group (FEISHU_GROUP_RULES may say otherwise)."""
    group_rules: str = Field("", validation_alias="FEISHU_GROUP_RULES")
    """Per-group rules, JSON: {"oc_…": {"policy": …, "require_mention": …, "allowed": […],
    "busy": …}}."""
    require_mention: bool = Field(True, validation_alias="FEISHU_REQUIRE_MENTION")
    """In groups, only messages that @mention the bot are taken."""
    mention_all: bool = Field(False, validation_alias="FEISHU_MENTION_ALL")
    """Whether @_all (everyone) counts as a mention of the bot."""
    allow_bots: bool = Field(False, validation_alias="FEISHU_ALLOW_BOTS")
    """Take messages from other bots (the bot's own are always dropped)."""
    refusal_notice_every_s: int = Field(86_400, validation_alias="FEISHU_REFUSAL_NOTICE_EVERY_S",
                                        ge=0)
    """A refused direct message is answered with one polite line at most this often per
    user; 0: never."""
    admins: str = Field("", validation_alias="FEISHU_ADMINS")
    """Admins' open_ids, comma-separated: admin_only groups, allowlists, approvals."""
    allowed_users: str = Field("", validation_alias="FEISHU_ALLOWED_USERS")
    """open_ids let in by the allowlist policies; they may decide approvals too."""

    @field_validator("group_rules")
    @classmethod
    def _check_group_rules(cls, value: str) -> str:
        parse_group_rules(value)
        return value

    @field_validator("admins", "allowed_users")
    @classmethod
    def _check_ids(cls, value: str) -> str:
        return ",".join(id_list(value))

    @property
    def admin_ids(self) -> frozenset[str]:
        return frozenset(id_list(self.admins))

    @property
    def allowed_user_ids(self) -> frozenset[str]:
        return frozenset(id_list(self.allowed_users))
