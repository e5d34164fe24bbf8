"""The settings of operating: history, logs, metrics, Flower."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator

from gateway.core.settings_part import SettingsPart


class OperatingSettings(SettingsPart):
    """What an operator reads: a chat's history, the logs, the metrics and Celery's task events."""

    doc_title: ClassVar[str] = "Operating: history, logs, metrics, Flower"
    doc_link: ClassVar[str] = "operating.md"

    history_turns: int = Field(10, validation_alias="GATEWAY_HISTORY_TURNS", ge=0, le=1000)
    """A chat's last finished turns kept with their outcome (`feishu-gateway chat`); the
    message of one that failed, stopped or was given up is kept for `retry` (0: none)."""
    retry_retention_s: int = Field(86_400, validation_alias="GATEWAY_RETRY_RETENTION_S", gt=0)
    """How long after a chat's last turn its history (and so `retry`) is kept."""
    log_level: str = Field("INFO", validation_alias="GATEWAY_LOG_LEVEL")
    """DEBUG, INFO, WARNING or ERROR; a line per turn is INFO, a line per message DEBUG. A
    worker's too, unless `celery … worker` is given -l/--loglevel."""
    log_format: Literal["auto", "json", "text"] = Field("auto",
                                                        validation_alias="GATEWAY_LOG_FORMAT")
    """auto: JSON lines when stderr is not a terminal, key=value text on one."""
    metrics_port: int = Field(0, validation_alias="GATEWAY_METRICS_PORT", ge=0, le=65535)
    """The listener's Prometheus `/metrics` port (0: not served)."""
    worker_metrics_port: int = Field(0, validation_alias="GATEWAY_WORKER_METRICS_PORT", ge=0,
                                     le=65535)
    """A worker host's `/metrics` port, every pool process summed (0: not served)."""
    metrics_addr: str = Field("127.0.0.1", validation_alias="GATEWAY_METRICS_ADDR")
    """The address both metrics endpoints bind (0.0.0.0 in a container)."""
    prometheus_multiproc_dir: str = Field("", validation_alias="PROMETHEUS_MULTIPROC_DIR")
    """prometheus_client's multiprocess folder, needed by GATEWAY_WORKER_METRICS_PORT."""
    task_events: bool = Field(False, validation_alias="GATEWAY_TASK_EVENTS")
    """Celery task events from each worker's start, for Flower (they cost about a
    fifth of the throughput; Flower turns them on while it runs)."""

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR")
        return level
