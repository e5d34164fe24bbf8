"""Gateway processes (Celery workers, listeners) as subprocesses: for the demo and the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

WORKER_READY = "ready."
LISTENER_READY = "listening to"


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str,
               interval_s: float = 0.05) -> object:
    """Poll `predicate` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


class GatewayProcess:
    """A subprocess whose combined output goes to a log file we can wait on."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str],
                 workdir: Path) -> None:
        self.name = name
        self.argv, self.env, self.workdir = list(argv), dict(env), workdir
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        full_env = {**os.environ, **env, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            [sys.executable, *argv], cwd=workdir, env=full_env,
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        """The last lines of the log, for a failure report."""
        return "\n".join(self.log().splitlines()[-lines:])

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (the worker and its pool processes), as a
        machine or container dying would."""
        if self.alive:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def wait_for_log(self, needle: str, timeout_s: float = 30) -> None:
        def seen() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return needle in self.log()

        wait_until(seen, timeout_s, f"{needle!r} in the {self.name} log")

    def exit_code(self) -> int | None:
        """Its exit code once it ended, else None."""
        return self.process.poll()

    def stop(self, sig: int | None = signal.SIGTERM, timeout_s: float = 15) -> int:
        """Signal the process (`sig` None: it was signalled already) and wait, killing it
        and its group after `timeout_s`; returns its exit code."""
        if self.process.poll() is None:
            if sig is not None:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()
        return self.process.returncode


def stop_all(processes: Sequence[GatewayProcess], timeout_s: float = 15) -> None:
    """Stop several processes at once: each is signalled before any is waited for."""
    try:
        for process in processes:
            if process.alive:
                process.process.send_signal(signal.SIGTERM)
        for process in processes:
            process.stop(None, timeout_s=timeout_s)  # (once: a second SIGTERM is not a stop)
    finally:  # a second Ctrl-C meanwhile: none is left running without its Redis
        for process in processes:
            process.kill()


class StartFailed(Exception):
    """A process that exited, or never logged that it is ready, while starting."""

    def __init__(self, process: GatewayProcess, why: str) -> None:
        super().__init__(f"the {process.name} {why}")
        self.process = process


def wait_ready(ready: Mapping[GatewayProcess, str], timeout_s: float,
               interval_s: float = 0.1) -> None:
    """Wait until each process logged its needle; StartFailed names the first one that
    exited meanwhile (at once) or is still not ready at the deadline."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(ready)
    while waiting:
        for process, needle in list(waiting.items()):
            if needle in process.log():
                del waiting[process]
            elif (code := process.exit_code()) is not None:
                raise StartFailed(process, f"exited with code {code} while starting")
        if waiting and time.monotonic() > deadline:
            process = next(iter(waiting))
            raise StartFailed(process, f"was not ready after {timeout_s:g}s (no "
                                       f"{waiting[process]!r} in its log)")
        if waiting:
            time.sleep(interval_s)


def worker_argv(name: str, concurrency: int, loglevel: str = "INFO",
                pool: str = "prefork") -> list[str]:
    """`celery -A tasks worker`, as an operator would run it, for one named worker."""
    return ["-m", "celery", "-A", "tasks", "worker", "--pool", pool, "-c", str(concurrency),
            "-n", f"{name}@%h", "-l", loglevel, "--without-gossip", "--without-mingle"]


LISTENER_ARGV = ["-m", "gateway.ops.cli", "listen"]
SERVE_ARGV = ["-m", "gateway.ops.cli", "serve"]
"""The listener in webhook mode; it logs LISTENER_READY too when it serves."""
