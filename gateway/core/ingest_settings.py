"""The settings of taking events in (the listener's ingest step, its gate, and the events it
keeps to take later)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gateway.core.settings_part import SettingsPart


class IngestSettings(SettingsPart):
    """How the listener takes events: the gate that answers each within Feishu's 3 s, the
    groups it takes together, and the refused events it takes later."""

    doc_title: ClassVar[str] = "Taking events in"
    doc_link: ClassVar[str] = "design.md#taking-events-in"

    ingest_wait_max_ms: int = Field(1500, validation_alias="FEISHU_INGEST_WAIT_MAX_MS", ge=0,
                                    le=2900)
    """The longest an event waits for its Redis step to begin; its ACK then comes with the
    step (bounded by GATEWAY_REDIS_TIMEOUT_S), within Feishu's 3 s. An event that cannot
    begin in time (the steps ahead of it would take longer, or this passed) is answered at
    once with a failure (ACK 500; webhook 503) and taken later, in its chat's order, by the
    listener's next step; Feishu's delivery of it again is then a duplicate (0: no limit)."""
    ingest_group_max: int = Field(64, validation_alias="FEISHU_INGEST_GROUP_MAX", ge=1,
                                  le=1024)
    """The most events of one long connection that one Redis step takes together (the
    events that arrived while the step before ran; 1: one at a time)."""
    ingest_later_cap: int = Field(10_000, validation_alias="FEISHU_INGEST_LATER_CAP", ge=0)
    """Refused events a listener keeps to take later (all its apps together; webhook mode:
    per server); past it, a refused event is left to Feishu's delivery of it again (0: none
    kept)."""
