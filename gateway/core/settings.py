"""One frozen settings object, read once from the environment and an optional `.env`."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from gateway.core.errors import SettingsError
from gateway.core.ingest_settings import IngestSettings
from gateway.core.logs import masked_url
from gateway.core.rules import (
    BusyMode,
    DmPolicy,
    GroupPolicy,
    Rules,
    busy_mode,
    parse_group_rules,
    parse_menu,
)
from gateway.core.webhook_settings import WEBHOOK_SECRETS, WebhookSettings

DEFAULT_DOMAIN = "https://open.feishu.cn"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BROKER_SCHEMES = ("redis", "rediss", "unix", "amqp", "amqps", "pyamqp")


class Settings(IngestSettings, WebhookSettings, BaseSettings):
    """Everything the listener, the workers and the CLI may be configured with."""

    model_config = SettingsConfigDict(
        frozen=True, env_file=".env", extra="ignore", populate_by_name=True,
        use_attribute_docstrings=True,  # each field's docstring is its help (docs/settings.md)
    )

    feishu_app_id: str = Field("", validation_alias="FEISHU_APP_ID")
    """The bot app's id."""
    feishu_app_secret: SecretStr = Field(SecretStr(""), validation_alias="FEISHU_APP_SECRET")
    """The bot app's secret (never printed)."""
    feishu_domain: str = Field(DEFAULT_DOMAIN, validation_alias="FEISHU_DOMAIN")
    """Base of the long-connection endpoint and the open APIs (https://open.larksuite.com
    for Lark, the simulator's address for the simulator)."""
    redis_url: str = Field(DEFAULT_REDIS_URL, validation_alias="REDIS_URL")
    """The chat state's Redis, and the broker unless CELERY_BROKER_URL is set."""
    celery_broker_url: str = Field("", validation_alias="CELERY_BROKER_URL")
    """The broker, when it is not the state Redis: another Redis, or RabbitMQ (amqp://)."""
    agent: str = Field("echo", validation_alias="GATEWAY_AGENT", min_length=1)
    """The agent: `echo`, `openai`, `showcase` (the demo's) or `package.module:factory`."""
    cancel_timeout_s: float = Field(5.0, validation_alias="GATEWAY_CANCEL_TIMEOUT", gt=0)
    """Seconds /stop waits for a turn to end before fencing it off."""
    cancel_poll_s: float = Field(0.25, validation_alias="GATEWAY_CANCEL_POLL_S", gt=0)
    """How often a running turn extends its lease and checks for /stop."""
    cancel_terminate: bool = Field(False, validation_alias="GATEWAY_CANCEL_TERMINATE")
    """Also SIGKILL the pool process of a turn that outlived the cancel timeout (a
    last resort; prefork only)."""
    lease_ttl_s: float = Field(30.0, validation_alias="GATEWAY_LEASE_TTL_S", gt=0)
    """A running turn's lease: a killed worker's chat runs again after this. Also how
    long a published turn may wait before it is published again."""
    history_turns: int = Field(10, validation_alias="GATEWAY_HISTORY_TURNS", ge=0, le=1000)
    """A chat's last finished turns kept with their outcome (`feishu-gateway chat`); the
    message of one that failed, stopped or was given up is kept for `retry` (0: none)."""
    retry_retention_s: int = Field(86_400, validation_alias="GATEWAY_RETRY_RETENTION_S", gt=0)
    """How long after a chat's last turn its history (and so `retry`) is kept."""
    claim_ttl_s: float = Field(15.0, validation_alias="GATEWAY_CLAIM_TTL_S", gt=0)
    """The lease of a turn being published; a lost publish heals after this."""
    queued_ttl_s: float = Field(900.0, validation_alias="GATEWAY_QUEUED_TTL_S", gt=0)
    """The longest lease of a published turn no worker started yet (it is published
    again after the lease TTL, then 2x, 4x ... up to 8x it, while the turns queue is empty)."""
    feishu_apps: SecretStr = Field(SecretStr(""), validation_alias="FEISHU_APPS")
    """More apps for one listener: `app_id:app_secret` pairs, comma-separated. With more
    than one app in all, each app's bot keeps its own state of a chat (`<chat_id>@<app_id>`);
    workers and the CLI need the same list."""
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
    dm_policy: DmPolicy = Field("open", validation_alias="FEISHU_DM_POLICY")
    """Who may talk to the bot in a direct message."""
    group_policy: GroupPolicy = Field("open", validation_alias="FEISHU_GROUP_POLICY")
    """Who may talk to the bot in a group (FEISHU_GROUP_RULES may say otherwise)."""
    group_rules: str = Field("", validation_alias="FEISHU_GROUP_RULES")
    """Per-group rules, JSON: {"oc_…": {"policy": …, "require_mention": …, "allowed": […],
    "busy": …}}."""
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
    welcome_group: str = Field("", validation_alias="FEISHU_WELCOME_GROUP")
    """What the bot says once in a group it was added to (empty: nothing)."""
    welcome_dm: str = Field("", validation_alias="FEISHU_WELCOME_DM")
    """What the bot says once to a user who opens its direct chat for the first time
    (empty: nothing)."""
    menu: str = Field("", validation_alias="FEISHU_MENU")
    """The bot menu's items, JSON: {"<event_key>": "/new" | "/stop" | "<text>"}: a click
    runs the command, or the text as if typed, in the person's direct chat with the bot
    (docs/replies-and-access.md#the-bot-menu). A key not listed is one log line."""
    typing: bool = Field(True, validation_alias="FEISHU_TYPING")
    """A reaction on the user's message while its turn runs (and a mark when it failed)."""
    typing_emoji: str = Field("Typing", validation_alias="FEISHU_TYPING_EMOJI", min_length=1)
    """The typing reaction's emoji_type."""
    failure_emoji: str = Field("CrossMark", validation_alias="FEISHU_FAILURE_EMOJI")
    """The failure mark's emoji_type (empty: none)."""
    send_rate_per_s: float = Field(50.0, validation_alias="FEISHU_SEND_RATE_PER_S", ge=0)
    """Sends per second per app, shared by every worker through Redis (0: no limit)."""
    send_rate_per_min: float = Field(1000.0, validation_alias="FEISHU_SEND_RATE_PER_MIN", ge=0)
    """Sends per minute per app."""
    chat_send_rate_per_s: float = Field(5.0, validation_alias="FEISHU_CHAT_SEND_RATE_PER_S",
                                        ge=0)
    """Sends per second to one chat."""
    fetch_max_bytes: int = Field(20 * 1024 * 1024, validation_alias="FEISHU_FETCH_MAX_BYTES",
                                 ge=1)
    """`turn.fetch` downloads attachments up to this size."""
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
    streaming: bool = Field(True, validation_alias="FEISHU_STREAMING")
    """An agent that returns its answer in pieces is shown as it writes: in a card, or (reply
    format text or post) in one message edited in place."""
    stream_interval_ms: int = Field(300, validation_alias="FEISHU_STREAM_INTERVAL_MS", ge=50)
    """A streamed answer's text is shown at most this often."""
    reply_format: Literal["auto", "text", "post", "card"] = Field(
        "auto", validation_alias="FEISHU_REPLY_FORMAT")
    """auto: plain text as text, markdown as a post, code blocks or tables as a card."""
    admins: str = Field("", validation_alias="FEISHU_ADMINS")
    """Admins' open_ids, comma-separated: admin_only groups, allowlists, approvals."""
    allowed_users: str = Field("", validation_alias="FEISHU_ALLOWED_USERS")
    """open_ids let in by the allowlist policies; they may decide approvals too."""
    max_attempts: int = Field(3, validation_alias="GATEWAY_MAX_ATTEMPTS", ge=1)
    """Turns started for one message that never finished before the user is told it
    cannot be answered and the chat moves on."""
    turn_time_limit_s: float = Field(1800.0, validation_alias="GATEWAY_TURN_TIME_LIMIT_S", gt=0)
    """A turn that hangs and ignores /stop loses its chat after this (in prefork
    also Celery's hard time limit, which frees the slot)."""
    sweep_interval_s: float = Field(2.0, validation_alias="GATEWAY_SWEEP_INTERVAL_S", gt=0)
    """How often each listener's and worker's sweeper runs."""
    inbox_cap: int = Field(100, validation_alias="GATEWAY_INBOX_CAP", ge=1)
    """Messages a chat may have waiting, the running one included."""
    outbox_cap: int = Field(10_000, validation_alias="GATEWAY_OUTBOX_CAP", ge=1)
    """Publishes a listener holds while the broker is slow or down; past it, events are
    answered with a failure (Feishu delivers them again)."""
    dedupe_ttl_s: int = Field(172_800, validation_alias="GATEWAY_DEDUPE_TTL_S", ge=86_400)
    """How long a message id is remembered (at least a day)."""
    lock_registry_cap: int = Field(10_000, validation_alias="GATEWAY_LOCK_REGISTRY_CAP", ge=1)
    """Lock handles kept per process (held ones are never evicted)."""
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
    reply_chunk_chars: int = Field(4000, validation_alias="GATEWAY_REPLY_CHUNK_CHARS", ge=200,
                                   le=30_000)
    """A longer reply is sent as several messages labelled (i/n)."""
    max_text_chars: int = Field(16_000, validation_alias="GATEWAY_MAX_TEXT_CHARS", ge=1)
    """Longer incoming texts are cut, with a `…[truncated]` mark."""
    worker_concurrency: int = Field(2, validation_alias="GATEWAY_WORKER_CONCURRENCY", ge=1)
    """Celery worker processes (`-c` overrides it)."""
    log_level: str = Field("INFO", validation_alias="GATEWAY_LOG_LEVEL")
    """DEBUG, INFO, WARNING or ERROR; a line per turn is INFO, a line per message DEBUG. A
    worker's too, unless `celery … worker` is given -l/--loglevel."""
    log_format: Literal["auto", "json", "text"] = Field("auto",
                                                        validation_alias="GATEWAY_LOG_FORMAT")
    """auto: JSON lines when stderr is not a terminal, key=value text on one."""
    reply_retry_budget_s: float = Field(120.0, validation_alias="GATEWAY_REPLY_RETRY_BUDGET_S",
                                        gt=0)
    """How long a reply is retried before it is given up (the chat's next turn
    waits meanwhile); a worker's warm shutdown cuts it short and hands the reply back."""
    stop_debounce_s: float = Field(3.0, validation_alias="GATEWAY_STOP_DEBOUNCE_S", ge=0)
    """A /stop within this long of the chat's previous one does nothing more."""
    redis_timeout_s: float = Field(1.0, validation_alias="GATEWAY_REDIS_TIMEOUT_S", gt=0)
    """Socket timeout of the listener's and the CLI's Redis client, no retry: an
    unreachable Redis means ACK 500 at once (workers use 5 s and one retry)."""
    durable_ack: Literal["none", "aof", "replica"] = Field(
        "none", validation_alias="GATEWAY_DURABLE_ACK")
    """ACK an event only once its admission is fsynced to the AOF (`aof`, Redis >= 7.2)
    or held by a replica (`replica`)."""
    durable_ack_timeout_ms: int = Field(1000, validation_alias="GATEWAY_DURABLE_ACK_TIMEOUT_MS",
                                        ge=1)
    """How long WAITAOF / WAIT may wait."""
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
    redis_cluster: bool = Field(False, validation_alias="GATEWAY_REDIS_CLUSTER")
    """REDIS_URL names a node of a Redis Cluster that keeps the chat state (sharded)."""
    state_shards: int = Field(16, validation_alias="GATEWAY_STATE_SHARDS", ge=1, le=16384)
    """On a cluster: how many shards the chats are spread over (a sweeper index and a
    control stream each)."""
    drain_turns: int = Field(8, validation_alias="GATEWAY_DRAIN_TURNS", ge=1)
    """A task whose chat has its next message waiting goes on with it, up to this many
    turns in all (1: no draining)."""
    drain_budget_s: float = Field(1.0, validation_alias="GATEWAY_DRAIN_BUDGET_S", ge=0)
    """A task goes on with its chat's next message only while it has run less than
    this long (0: no draining)."""
    task_events: bool = Field(False, validation_alias="GATEWAY_TASK_EVENTS")
    """Celery task events from each worker's start, for Flower (they cost about a
    fifth of the throughput; Flower turns them on while it runs)."""
    metrics_port: int = Field(0, validation_alias="GATEWAY_METRICS_PORT", ge=0, le=65535)
    """The listener's Prometheus `/metrics` port (0: not served)."""
    worker_metrics_port: int = Field(0, validation_alias="GATEWAY_WORKER_METRICS_PORT", ge=0,
                                     le=65535)
    """A worker host's `/metrics` port, every pool process summed (0: not served)."""
    metrics_addr: str = Field("127.0.0.1", validation_alias="GATEWAY_METRICS_ADDR")
    """The address both metrics endpoints bind (0.0.0.0 in a container)."""
    prometheus_multiproc_dir: str = Field("", validation_alias="PROMETHEUS_MULTIPROC_DIR")
    """prometheus_client's multiprocess folder, needed by GATEWAY_WORKER_METRICS_PORT."""

    @field_validator("feishu_domain", "openai_base_url")
    @classmethod
    def _check_http_url(cls, value: str, info: ValidationInfo) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            example = ("https://open.feishu.cn" if info.field_name == "feishu_domain"
                       else "http://127.0.0.1:8080/v1")
            raise ValueError(f"expected an http(s) URL such as {example}")
        return value.rstrip("/")

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("expected a redis:// URL such as redis://127.0.0.1:6379/0")
        return value

    @field_validator("celery_broker_url")
    @classmethod
    def _check_broker_url(cls, value: str) -> str:
        if value and urlsplit(value).scheme not in BROKER_SCHEMES:
            raise ValueError("expected a redis:// or amqp:// URL (or nothing: the REDIS_URL)")
        return value

    @field_validator("redis_cluster")
    @classmethod
    def _check_cluster(cls, value: bool, info: ValidationInfo) -> bool:
        # info.data holds the fields declared above this one: keep redis_cluster below
        # celery_broker_url and durable_ack (test_settings checks both refusals)
        if value and not info.data.get("celery_broker_url"):
            raise ValueError("a Redis Cluster keeps the chat state only: set CELERY_BROKER_URL "
                             "to the broker (a plain Redis or RabbitMQ)")
        if value and info.data.get("durable_ack", "none") != "none":
            raise ValueError("GATEWAY_DURABLE_ACK is not supported on a Redis Cluster yet")
        return value

    @field_validator("catchup_window_s")
    @classmethod
    def _check_window(cls, value: float, info: ValidationInfo) -> float:
        after = info.data.get("catchup_after_s", 60.0)
        if value <= after:
            raise ValueError(f"must be longer than FEISHU_CATCHUP_AFTER_S ({after:g})")
        return value

    @field_validator("feishu_apps")
    @classmethod
    def _check_apps(cls, value: SecretStr) -> SecretStr:
        parse_apps(value.get_secret_value())
        return value

    @field_validator("busy_mode", mode="before")
    @classmethod
    def _check_busy_mode(cls, value: object) -> BusyMode:
        return busy_mode(value)

    @field_validator("group_rules")
    @classmethod
    def _check_group_rules(cls, value: str) -> str:
        parse_group_rules(value)
        return value

    @field_validator("menu")
    @classmethod
    def _check_menu(cls, value: str) -> str:
        parse_menu(value)
        return value

    @field_validator("admins", "allowed_users")
    @classmethod
    def _check_ids(cls, value: str) -> str:
        return ",".join(id_list(value))

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR")
        return level

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_s * 1000)

    @property
    def claim_ttl_ms(self) -> int:
        return int(self.claim_ttl_s * 1000)

    @property
    def queued_ttl_ms(self) -> int:
        return int(self.queued_ttl_s * 1000)

    @property
    def requeue_cap_ms(self) -> int:
        """The longest wait between two publishes of a turn nobody picked up."""
        return min(8 * self.lease_ttl_ms, self.queued_ttl_ms)

    @property
    def broker_url(self) -> str:
        """Celery's broker: CELERY_BROKER_URL, else the state Redis."""
        return self.celery_broker_url or self.redis_url

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
    def admin_ids(self) -> frozenset[str]:
        return frozenset(id_list(self.admins))

    @property
    def allowed_user_ids(self) -> frozenset[str]:
        return frozenset(id_list(self.allowed_users))

    @property
    def menu_items(self) -> dict[str, str]:
        """FEISHU_MENU, read: event_key → the command or text a click stands for."""
        return parse_menu(self.menu)

    @property
    def admission_rules(self) -> Rules:
        return Rules(dm_policy=self.dm_policy, group_policy=self.group_policy,
                     allowed=self.allowed_user_ids, admins=self.admin_ids,
                     require_mention=self.require_mention, mention_all=self.mention_all,
                     allow_bots=self.allow_bots, groups=parse_group_rules(self.group_rules),
                     busy=self.busy_mode)

    @property
    def has_credentials(self) -> bool:
        return bool(self.apps)


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


def _describe(error: ValidationError) -> str:
    """Turn pydantic's report into one line naming the variable and what it expects."""
    first = error.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "?"
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info is not None else None
    name = alias if isinstance(alias, str) else field.upper()
    got = first.get("input")
    secret = name in ("FEISHU_APP_SECRET", "FEISHU_APPS", "OPENAI_API_KEY", *WEBHOOK_SECRETS)
    if isinstance(got, str) and "://" in got:
        got = masked_url(got)
    shown = "" if secret else f", got {got!r}"
    return f"bad setting {name}: {first['msg']}{shown}"


def load_settings(**overrides: Any) -> Settings:
    """Read the settings once; raise SettingsError with one clear line on a bad value."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None
