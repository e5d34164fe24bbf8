"""The worker's lifecycle hooks: what runs at each moment of a Celery worker's life, one
concern per hook (a module each), all hooked up to Celery's signals here and nowhere else
(dramatiq's middleware has this shape). A hook overrides the moments it cares for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    task_revoked,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)


class Hook:
    """One concern of the worker's life; each method is a moment (by default nothing)."""

    def logs_set_up(self, logger: logging.Logger) -> None:
        """Celery set up a logger of the worker (its own, or the tasks')."""

    def starting(self) -> None:
        """The worker starts: in its main process, before the pool forks."""

    def ready(self) -> None:
        """The worker consumes its queues."""

    def shutting_down(self) -> None:
        """A warm shutdown began: in the main process's signal handler (no lock, no I/O
        that may block)."""

    def process_ending(self) -> None:
        """A pool process ends (prefork; each one)."""

    def stopping(self) -> None:
        """The worker stops: in its main process (with the threads pool, the only one)."""

    def revoked(self, request: Any, terminated: bool, signum: Any) -> None:
        """A turn's task was revoked (Celery's `task_revoked` of the turn task)."""


_MOMENTS: dict[str, tuple[tuple[Any, ...], Callable[[Hook], Callable[..., None]]]] = {
    "logs_set_up": ((after_setup_logger, after_setup_task_logger),
                    lambda h: lambda logger, **_: h.logs_set_up(logger)),
    "starting": ((worker_init,), lambda h: lambda **_: h.starting()),
    "ready": ((worker_ready,), lambda h: lambda **_: h.ready()),
    "shutting_down": ((worker_shutting_down,), lambda h: lambda **_: h.shutting_down()),
    "process_ending": ((worker_process_shutdown,), lambda h: lambda **_: h.process_ending()),
    "stopping": ((worker_shutdown,), lambda h: lambda **_: h.stopping()),
}
"""Each moment: the Celery signals it is, and how a hook's method is called from one."""


def connect(hooks: Sequence[Hook], turn_task: Any) -> None:
    """Hook each of `hooks` up to the signals of the moments it overrides, in order (so a
    moment runs the hooks in the order given); `revoked` for `turn_task` alone."""
    for hook in hooks:
        for moment, (signals, call) in _MOMENTS.items():
            if overrides(hook, moment):
                for signal in signals:
                    signal.connect(call(hook), weak=False)
        if overrides(hook, "revoked"):
            task_revoked.connect(
                lambda request=None, terminated=False, signum=None, _hook=hook, **_:
                _hook.revoked(request, terminated, signum), sender=turn_task, weak=False)


def overrides(hook: Hook, moment: str) -> bool:
    return getattr(type(hook), moment) is not getattr(Hook, moment)
