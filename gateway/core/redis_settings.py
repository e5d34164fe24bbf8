"""The settings of Redis and the broker."""

from __future__ import annotations

from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from gateway.core.settings_part import SettingsPart

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
BROKER_SCHEMES = ("redis", "rediss", "unix", "amqp", "amqps", "pyamqp")


class RedisSettings(SettingsPart):
    """Where the chat state and the broker live, and how durable an ACK is."""

    doc_title: ClassVar[str] = "Redis and the broker"
    doc_link: ClassVar[str] = "design.md#by-redis-configuration"

    redis_url: str = Field(DEFAULT_REDIS_URL, validation_alias="REDIS_URL")
    """The chat state's Redis, and the broker unless CELERY_BROKER_URL is set."""
    celery_broker_url: str = Field("", validation_alias="CELERY_BROKER_URL")
    """The broker, when it is not the state Redis: another Redis, or RabbitMQ (amqp://)."""
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
    redis_cluster: bool = Field(False, validation_alias="GATEWAY_REDIS_CLUSTER")
    """REDIS_URL names a node of a Redis Cluster that keeps the chat state (sharded)."""
    state_shards: int = Field(16, validation_alias="GATEWAY_STATE_SHARDS", ge=1, le=16384)
    """On a cluster: how many shards the chats are spread over (a sweeper index and a
    control stream each)."""
    dedupe_ttl_s: int = Field(172_800, validation_alias="GATEWAY_DEDUPE_TTL_S", ge=86_400)
    """How long a message id is remembered (at least a day)."""

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"expected a redis:// URL such as {DEFAULT_REDIS_URL}")
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
        # info.data holds the fields validated before this one: redis_cluster is declared
        # below celery_broker_url and durable_ack (test_settings checks both refusals)
        if value and not info.data.get("celery_broker_url"):
            raise ValueError("a Redis Cluster keeps the chat state only: set CELERY_BROKER_URL "
                             "to the broker (a plain Redis or RabbitMQ)")
        if value and info.data.get("durable_ack", "none") != "none":
            raise ValueError("GATEWAY_DURABLE_ACK is not supported on a Redis Cluster yet")
        return value

    @property
    def broker_url(self) -> str:
        """Celery's broker: CELERY_BROKER_URL, else the state Redis."""
        return self.celery_broker_url or self.redis_url
