"""The processes a bench run starts: one Redis, one simulator, then each contender in turn."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import redis

from bench import raw
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import (
    LISTENER_ARGV,
    LISTENER_READY,
    GatewayProcess,
    wait_until,
    worker_argv,
)
from gateway.simulator import Simulator


class Stack:
    def __init__(self, redis_server: EmbeddedRedis, sim: Simulator, workdir: Path) -> None:
        self.redis_server, self.sim, self.workdir = redis_server, sim, workdir
        self.client = redis.Redis.from_url(redis_server.url, decode_responses=True)
        self._count = 0

    def env(self, **extra: str) -> dict[str, str]:
        return {"REDIS_URL": self.redis_server.url, "FEISHU_APP_ID": self.sim.app_id,
                "FEISHU_APP_SECRET": self.sim.app_secret, "FEISHU_DOMAIN": self.sim.url,
                "GATEWAY_AGENT": "bench.agents:factory", "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
                # the peers it is measured against send replies only, as fast as they
                # like: so does it here (no reactions, no shared send quota)
                "FEISHU_TYPING": "false", "FEISHU_SEND_RATE_PER_S": "0", **extra}

    def start(self, name: str, argv: list[str], ready: str | None, **env: str) -> GatewayProcess:
        self._count += 1
        proc = GatewayProcess(f"{name}-{self._count}", argv, self.env(**env), self.workdir)
        if ready is not None:
            try:
                proc.wait_for_log(ready, timeout_s=60)
            except BaseException:
                proc.kill()
                raise
        return proc

    def worker(self, concurrency: int = 2, app: str = "tasks", **env: str) -> GatewayProcess:
        """`celery -A <app> worker` at its default log level (WARNING: no line per task, as
        operators run it), ready once it answers a ping."""
        self._count += 1
        name = f"bench{self._count}"
        argv = worker_argv(name, concurrency, loglevel="WARNING")
        argv[argv.index("tasks")] = app
        proc = self.start(f"worker-{app}", argv, None, **env)
        control = raw.app.control

        def answered() -> bool:
            if not proc.alive:
                raise RuntimeError(f"worker exited early:\n{proc.log()[-3000:]}")
            return any(name in host for reply in control.ping(timeout=0.5) for host in reply)

        try:
            wait_until(answered, 60, f"worker {name} to answer a ping")
        except BaseException:
            proc.kill()
            raise
        return proc

    def listener(self, **env: str) -> GatewayProcess:
        proc = self.start("listener", LISTENER_ARGV, LISTENER_READY, **env)
        self.wait_connections(1)
        return proc

    def client_process(self, kind: str) -> GatewayProcess:
        proc = self.start(kind, ["-m", "bench.clients", kind], "client starting")
        self.wait_connections(1)
        return proc

    def wait_connections(self, count: int) -> None:
        wait_until(lambda: self.sim.connection_count == count, 30,
                   f"{count} connection(s) to the simulator")

    @property
    def redis_pid(self) -> int:
        """The Redis server's process (its CPU is a share of each message's)."""
        return int(self.client.info("server")["process_id"])

    def reset_stats(self) -> None:
        self.client.config_resetstat()

    def command_calls(self) -> int:
        """Commands Redis ran since the last reset (scripts' inner calls included)."""
        return sum(int(v["calls"]) for k, v in self.client.info("commandstats").items()
                   if k not in ("cmdstat_info", "cmdstat_config"))

    def command_breakdown(self) -> dict[str, int]:
        return {k.removeprefix("cmdstat_"): int(v["calls"])
                for k, v in self.client.info("commandstats").items()}


@contextlib.contextmanager
def stack() -> Iterator[Stack]:
    workdir = Path(tempfile.mkdtemp(prefix="feishu-gateway-bench-"))
    # (the simulator delivers again an event not ACKed 200, on Feishu's schedule)
    with EmbeddedRedis() as server, Simulator() as sim:
        raw.app.conf.broker_url = server.url  # the bench's own Celery client: this Redis
        yield Stack(server, sim, workdir)
