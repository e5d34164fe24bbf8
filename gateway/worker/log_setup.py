"""Hook: Celery owns the worker's log handlers; they get the gateway's format
(GATEWAY_LOG_FORMAT), the turn's fields, and keep secrets out."""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.core.logs import dress_handlers, quiet_lark_handler
from gateway.core.settings import Settings
from gateway.worker.hooks import Hook


class LogSetup(Hook):
    def __init__(self, settings: Callable[[], Settings]) -> None:
        self._settings = settings

    def logs_set_up(self, logger: logging.Logger) -> None:
        dress_handlers(logger, self._settings().log_format)
        quiet_lark_handler()
