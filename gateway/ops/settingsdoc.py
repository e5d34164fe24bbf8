"""docs/settings.md, written from the `Settings` class: every variable, its default and its
help (the field's docstring). `python -m gateway.ops.settingsdoc > docs/settings.md` writes the
page again; tests/docs/test_docs.py fails when the page drifts from what this prints."""

from __future__ import annotations

import sys
import typing
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from gateway.core.settings import Settings

PAGE = "docs/settings.md"

GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Feishu apps and the long connection", "operating.md#production", (
        "FEISHU_APP_ID", "FEISHU_APP_SECRET", "FEISHU_APPS", "FEISHU_DOMAIN",
        "FEISHU_WS_PING_INTERVAL", "FEISHU_WS_PING_TIMEOUT", "FEISHU_LATE_AFTER_S",
        "FEISHU_LATE_EVENTS")),
    ("Taking events in", "design.md#taking-events-in", (
        "FEISHU_INGEST_WAIT_MAX_MS", "FEISHU_INGEST_GROUP_MAX", "FEISHU_INGEST_LATER_CAP")),
    ("Webhook mode (`serve`)", "webhook.md", (
        "FEISHU_VERIFICATION_TOKEN", "FEISHU_ENCRYPT_KEY", "FEISHU_WEBHOOK_MAX_AGE_S",
        "FEISHU_WEBHOOK_ADDR", "FEISHU_WEBHOOK_PORT", "FEISHU_WEBHOOK_PATH",
        "FEISHU_WEBHOOK_MAX_BODY_BYTES", "FEISHU_WEBHOOK_CONCURRENCY")),
    ("Catch-up after an outage", "design.md#catch-up", (
        "FEISHU_CATCHUP_AFTER_S", "FEISHU_CATCHUP_WINDOW_S", "FEISHU_CATCHUP_MAX_CHATS",
        "FEISHU_CATCHUP_MAX_PAGES", "FEISHU_CATCHUP_PAGE_SIZE")),
    ("Who gets in", "replies-and-access.md#who-gets-in", (
        "FEISHU_DM_POLICY", "FEISHU_GROUP_POLICY", "FEISHU_GROUP_RULES",
        "FEISHU_REQUIRE_MENTION", "FEISHU_MENTION_ALL", "FEISHU_ALLOW_BOTS",
        "FEISHU_REFUSAL_NOTICE_EVERY_S", "FEISHU_ADMINS", "FEISHU_ALLOWED_USERS")),
    ("Replies", "replies-and-access.md#replies", (
        "FEISHU_REPLY_FORMAT", "FEISHU_STREAMING", "FEISHU_STREAM_INTERVAL_MS",
        "GATEWAY_REPLY_CHUNK_CHARS", "GATEWAY_REPLY_RETRY_BUDGET_S", "FEISHU_SEND_RATE_PER_S",
        "FEISHU_SEND_RATE_PER_MIN", "FEISHU_CHAT_SEND_RATE_PER_S", "FEISHU_TYPING",
        "FEISHU_TYPING_EMOJI", "FEISHU_FAILURE_EMOJI")),
    ("While a chat's turn runs", "replies-and-access.md#while-a-chats-turn-runs", (
        "GATEWAY_BUSY_MODE", "GATEWAY_MERGE_WINDOW_MS")),
    ("Agents", "agents.md", (
        "GATEWAY_AGENT", "GATEWAY_ORDER_SCOPE", "FEISHU_SESSION_SCOPE", "GATEWAY_AGENT_CACHE_CAP",
        "GATEWAY_AGENT_IDLE_TTL_S", "GATEWAY_AGENT_RELEASE_TIMEOUT_S",
        "GATEWAY_AGENT_RELEASE_FALLBACK_S", "FEISHU_FETCH_MAX_BYTES", "GATEWAY_MAX_TEXT_CHARS")),
    ("The `openai` agent", "agents.md#the-openai-agent", (
        "OPENAI_BASE_URL", "OPENAI_API_KEY", "GATEWAY_MODEL", "GATEWAY_SYSTEM_PROMPT",
        "GATEWAY_SYSTEM_PROMPT_FILE", "GATEWAY_HISTORY_MESSAGES", "GATEWAY_HISTORY_TTL_S",
        "GATEWAY_LLM_TIMEOUT_S")),
    ("Redis and the broker", "design.md#by-redis-configuration", (
        "REDIS_URL", "CELERY_BROKER_URL", "GATEWAY_REDIS_CLUSTER", "GATEWAY_STATE_SHARDS",
        "GATEWAY_REDIS_TIMEOUT_S", "GATEWAY_DURABLE_ACK", "GATEWAY_DURABLE_ACK_TIMEOUT_MS",
        "GATEWAY_DEDUPE_TTL_S")),
    ("Turns, stops and recovery", "design.md#cancellation", (
        "GATEWAY_CANCEL_TIMEOUT", "GATEWAY_CANCEL_POLL_S", "GATEWAY_CANCEL_TERMINATE",
        "GATEWAY_STOP_DEBOUNCE_S", "GATEWAY_LEASE_TTL_S", "GATEWAY_CLAIM_TTL_S",
        "GATEWAY_QUEUED_TTL_S", "GATEWAY_SWEEP_INTERVAL_S", "GATEWAY_MAX_ATTEMPTS",
        "GATEWAY_TURN_TIME_LIMIT_S", "GATEWAY_INBOX_CAP", "GATEWAY_OUTBOX_CAP",
        "GATEWAY_DRAIN_TURNS", "GATEWAY_DRAIN_BUDGET_S", "GATEWAY_WORKER_CONCURRENCY",
        "GATEWAY_LOCK_REGISTRY_CAP")),
    ("Operating: history, logs, metrics, Flower", "operating.md", (
        "GATEWAY_HISTORY_TURNS", "GATEWAY_RETRY_RETENTION_S", "GATEWAY_LOG_LEVEL",
        "GATEWAY_LOG_FORMAT", "GATEWAY_METRICS_PORT", "GATEWAY_WORKER_METRICS_PORT",
        "GATEWAY_METRICS_ADDR", "PROMETHEUS_MULTIPROC_DIR", "GATEWAY_TASK_EVENTS")),
)
OTHER = "Other settings"

INTRO = """\
<!-- Written by `python -m gateway.ops.settingsdoc > docs/settings.md` from the docstrings
in gateway/core/settings.py and its parts (gateway/core/*_settings.py): edit those, then run
it again (tests/docs/test_docs.py checks the two agree). -->

# Settings

Every setting is an environment variable, read once at start (also from a `.env` file in
the working directory). A bad value stops start-up with one line naming the variable, e.g.
`feishu-gateway: bad setting GATEWAY_CANCEL_TIMEOUT: Input should be a valid number, ...`;
a secret's value is never printed. `feishu-gateway <command> --help` names the settings a
command reads. Each group links to the page that explains its settings at length.
"""


def variable(info: FieldInfo) -> str:
    alias = info.validation_alias
    assert isinstance(alias, str), "every setting is read from one environment variable"
    return alias


def default_of(info: FieldInfo) -> str:
    value: Any = info.default
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value == "":
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def choices_of(info: FieldInfo) -> tuple[str, ...]:
    if typing.get_origin(info.annotation) is typing.Literal:
        return tuple(str(choice) for choice in typing.get_args(info.annotation))
    return ()


def help_of(info: FieldInfo) -> str:
    text = " ".join((info.description or "").split())
    choices = choices_of(info)
    if choices:
        text += " One of " + ", ".join(f"`{choice}`" for choice in choices) + "."
    return text.replace("|", "\\|")


def render() -> str:
    """The whole page, grouped by area; a setting no group names lands under OTHER."""
    fields = {variable(info): info for info in Settings.model_fields.values()}
    groups = [(title, link, [name for name in names if name in fields])
              for title, link, names in GROUPS]
    grouped = {name for _, _, names in groups for name in names}
    rest = [name for name in fields if name not in grouped]
    if rest:
        groups.append((OTHER, "", rest))
    parts = [INTRO]
    for title, link, names in groups:
        parts.append(f"## {title}\n")
        if link:
            parts.append(f"More in [{link.split('#')[0]}]({link}).\n")
        rows = ["| variable | default | what it does |", "|---|---|---|"]
        rows += [f"| `{name}` | {default_of(fields[name])} | {help_of(fields[name])} |"
                 for name in names]
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def main() -> None:
    sys.stdout.write(render())


if __name__ == "__main__":
    main()
