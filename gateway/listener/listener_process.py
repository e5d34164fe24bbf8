"""The listener process's life: its metrics server (first, so the first events are counted
too), its service, SIGINT/SIGTERM for a clean stop, and a fatal refusal by Feishu that
ends it."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

from gateway.broker.names import TaskSender
from gateway.broker.publisher import bound_publishing
from gateway.core import metrics
from gateway.core.errors import GatewayError
from gateway.core.logs import quiet_lark_handler
from gateway.core.settings import Settings
from gateway.listener.service import ListenerService

FATAL_POLL_S = 0.5
"""How often the process looks for a signal or a fatal refusal."""


def run_listener(settings: Settings, sender: TaskSender, *, webhook: bool = False) -> None:
    """Run the listener until SIGINT or SIGTERM (then stop it cleanly), or until Feishu
    refuses an app for good (GatewayError saying why). `webhook`: take events by HTTP
    (`serve`) instead of the long connections."""
    quiet_lark_handler()  # the long connection's codec has loaded the SDK
    started: list[ListenerService] = []
    if settings.metrics_port:
        _check_multiproc_folder()

        def statuses() -> Iterable[Any]:
            return started[0].ingress.statuses() if started else ()

        try:
            metrics.serve_listener(settings.metrics_port, settings.metrics_addr, statuses)
        except OSError as error:
            raise GatewayError(f"cannot serve metrics on {settings.metrics_addr}:"
                               f"{settings.metrics_port} (GATEWAY_METRICS_PORT, "
                               f"GATEWAY_METRICS_ADDR): {error.strerror or error}") from None
    bound_publishing(sender, 2 * settings.redis_timeout_s)
    service = ListenerService(settings, sender, webhook=webhook).start()
    started.append(service)
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    while not stop.wait(FATAL_POLL_S):
        if service.ingress.fatal:
            service.stop()
            raise GatewayError(service.ingress.fatal)
    service.stop()


def _check_multiproc_folder() -> None:
    """Refuse, in one line and before anything starts, a multiprocess folder that cannot be
    written: with listener metrics on, prometheus_client would fail each event it counts."""
    for name in (metrics.MULTIPROC_ENV, metrics.MULTIPROC_ENV.lower()):  # (lower: deprecated)
        folder = os.environ.get(name)
        if folder:
            try:
                with tempfile.NamedTemporaryFile(dir=folder, prefix=".gateway-probe-"):
                    pass
            except OSError as error:
                raise GatewayError(
                    f"{name}={folder} cannot be written ({error.strerror or error}), and with "
                    "GATEWAY_METRICS_PORT set prometheus_client writes every figure there; it "
                    "is for the workers' metrics only: unset it for `listen`") from None
            return
