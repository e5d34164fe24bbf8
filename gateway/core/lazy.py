"""Attributes built once, on first use, that a fork never leaves waiting.

Python 3.11's `functools.cached_property` builds under one lock per attribute of a class,
shared by every instance. A worker's main process builds its runtime's parts on threads of
its own (a Celery revoke is handled on one) while billiard forks a new pool process (after
a terminate, a crash, a recycled child): a lock held by such a thread at that instant is
copied held, and the child, building its own runtime's same part, waits for it forever.
Its slot is lost, and the task handed to it with it. Python 3.12 dropped that lock; these
are its behaviour on 3.11 too.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
_MISSING = object()


class cached_property(functools.cached_property[T], Generic[T]):  # noqa: N801, TID251
    """`functools.cached_property` without its lock: two threads asking at the same moment
    may each build (the last one is kept); use `locked_cached_property` where that matters."""

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> cached_property[T]:
        ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any] | None = None) -> Any:
        if instance is None:
            return self
        cache = instance.__dict__
        value = cache.get(self.attrname, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING:
            value = self.func(instance)
            cache[self.attrname] = value  # type: ignore[index]
        return value


class locked_cached_property(cached_property[T], Generic[T]):  # noqa: N801  (a decorator)
    """Threads asking at the same moment build once (a worker's threads pool asks for its
    turn runner from several threads at once). Once built, the value is read without the
    lock. A forked child starts with a fresh lock, never one a thread of its parent held."""

    def __init__(self, build: Any) -> None:
        super().__init__(build)
        self._lock = threading.RLock()
        os.register_at_fork(after_in_child=self._renew_lock)

    def _renew_lock(self) -> None:
        self._lock = threading.RLock()

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> locked_cached_property[T]:
        ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type[Any] | None = None) -> Any:
        if instance is None:
            return self
        value = instance.__dict__.get(self.attrname, _MISSING)  # type: ignore[arg-type]
        if value is not _MISSING:
            return value
        with self._lock:
            return super().__get__(instance, owner)
