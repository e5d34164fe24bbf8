"""The settings of turns, stops and recovery."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gateway.core.settings_part import SettingsPart


class TurnSettings(SettingsPart):
    """Leases, cancels, attempts, caps and draining: how a chat's turns run, stop and heal."""

    doc_title: ClassVar[str] = "Turns, stops and recovery"
    doc_link: ClassVar[str] = "design.md#cancellation"

    cancel_timeout_s: float = Field(5.0, validation_alias="GATEWAY_CANCEL_TIMEOUT", gt=0)
    """Seconds /stop waits for a turn to end before fencing it off."""
    cancel_poll_s: float = Field(0.25, validation_alias="GATEWAY_CANCEL_POLL_S", gt=0)
    """How often a running turn extends its lease and checks for /stop."""
    cancel_terminate: bool = Field(False, validation_alias="GATEWAY_CANCEL_TERMINATE")
    """Also SIGKILL the pool process of a turn that outlived the cancel timeout (a
    last resort; prefork only)."""
    stop_debounce_s: float = Field(3.0, validation_alias="GATEWAY_STOP_DEBOUNCE_S", ge=0)
    """A /stop within this long of the chat's previous one does nothing more."""
    lease_ttl_s: float = Field(30.0, validation_alias="GATEWAY_LEASE_TTL_S", gt=0)
    """A running turn's lease: a killed worker's chat runs again after this. Also the step
    of the backoff of a published turn no worker started (see GATEWAY_QUEUED_TTL_S)."""
    claim_ttl_s: float = Field(15.0, validation_alias="GATEWAY_CLAIM_TTL_S", gt=0)
    """How long a claimed turn may wait for a worker to start it before the sweeper
    publishes it again: a publish lost with its listener or the broker heals after this."""
    queued_ttl_s: float = Field(900.0, validation_alias="GATEWAY_QUEUED_TTL_S", gt=0)
    """The longest lease of a published turn no worker started yet (it is published
    again after the claim TTL, then after 2x, 4x ... up to 8x the lease TTL, while the turns
    queue is empty)."""
    sweep_interval_s: float = Field(2.0, validation_alias="GATEWAY_SWEEP_INTERVAL_S", gt=0)
    """How often each listener's and worker's sweeper runs."""
    max_attempts: int = Field(3, validation_alias="GATEWAY_MAX_ATTEMPTS", ge=1)
    """Turns started for one message that never finished before the user is told it
    cannot be answered and the chat moves on."""
    turn_time_limit_s: float = Field(1800.0, validation_alias="GATEWAY_TURN_TIME_LIMIT_S", gt=0)
    """A turn that hangs and ignores /stop loses its chat after this (in prefork
    also Celery's hard time limit, which frees the slot)."""
    inbox_cap: int = Field(100, validation_alias="GATEWAY_INBOX_CAP", ge=1)
    """Messages a chat may have waiting, the running one included."""
    outbox_cap: int = Field(10_000, validation_alias="GATEWAY_OUTBOX_CAP", ge=1)
    """Publishes a listener holds while the broker is slow or down; past it, events are
    answered with a failure (Feishu delivers them again)."""
    drain_turns: int = Field(8, validation_alias="GATEWAY_DRAIN_TURNS", ge=1)
    """A task whose chat has its next message waiting goes on with it, up to this many
    turns in all (1: no draining)."""
    drain_budget_s: float = Field(1.0, validation_alias="GATEWAY_DRAIN_BUDGET_S", ge=0)
    """A task goes on with its chat's next message only while it has run less than
    this long (0: no draining)."""
    worker_concurrency: int = Field(2, validation_alias="GATEWAY_WORKER_CONCURRENCY", ge=1)
    """Celery worker processes (`-c` overrides it)."""
    lock_registry_cap: int = Field(10_000, validation_alias="GATEWAY_LOCK_REGISTRY_CAP", ge=1)
    """Lock handles kept per process (held ones are never evicted)."""

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
