"""`python -m bench`: every contender in one run on one Redis; prints the table, saves JSON
and a PNG of the latency distributions (into bench/results/ unless --out says otherwise)."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import contenders, dedupe, ingest, quota, releases, report, sweep, topics
from bench.stack import stack
from gateway.ops.processes import REPO


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def rss(role: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "bench.memory", role], cwd=REPO, check=True,
                         capture_output=True, text=True, env=env)
    return {k: float(v) for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


def step(what: str) -> None:
    print(f"bench: {what} ...", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    r: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "machine": machine(),
                         "burst": args.burst}
    rates = tuple(args.rates)
    with stack() as st:
        step("raw Celery")
        r["raw_celery"] = contenders.raw_celery(st, args.burst, args.singles)
        step("naive bot")
        r["naive_bot"] = contenders.naive_bot(st, args.burst, args.singles)
        step("Celery reply bot")
        r["celery_bot"] = contenders.celery_bot(st, args.burst, args.singles)
        step("bare SDK ACKs")
        r["bare_sdk_acks"] = contenders.bare_sdk_acks(st, rates, args.ack_seconds)
        step("gateway")
        r["gateway"] = contenders.gateway(st, args.burst, args.singles, rates,
                                          args.ack_seconds, args.stop_trials,
                                          args.overload_burst, args.ack_burst)
        step("one listener's ingest ceiling, one event per step / in groups")
        r["ingest"] = ingest.measure(st)
        step("the order scope thread against chat")
        r["topics"] = topics.measure(st.client)
        step("dedupe marks")
        r["dedupe"] = dedupe.measure(st.client)
        step("replies per minute under Feishu's default quota, without / with reactions")
        r["quota"] = quota.measure(st, args.quota_burst)
        if not args.quick:
            step("gateway, task events off / on")
            r["gateway_no_events"] = contenders.gateway_burst(st, args.burst, 2, "ev0",
                                                              GATEWAY_TASK_EVENTS="false")
            r["gateway_events"] = contenders.gateway_burst(st, args.burst, 2, "ev1",
                                                           GATEWAY_TASK_EVENTS="true")
            step(f"gateway, {args.workers} worker processes and {args.listeners} listeners")
            r["scaling"] = {str(c): contenders.gateway_burst(st, args.burst, c, f"sc{c}")
                            for c in args.workers}
            r["listeners"] = {str(n): contenders.gateway_burst(st, args.burst, max(
                args.workers), f"li{n}", listeners=n) for n in args.listeners}
            step("turns behind a backlog of agent releases")
            r["releases"] = releases.measure(st)
            step(f"mass recovery of {args.sweep_chats:,} chats")
            r["sweep"] = sweep.measure(st, args.sweep_chats, 2)
            step("RSS at 10k and 1M chats")
            r["rss_mb"] = {role: rss(role) for role in ("listener", "worker")}
    return r


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--burst", type=int, default=2000, help="messages per burst")
    parser.add_argument("--singles", type=int, default=200, help="one-at-a-time messages")
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 300, 500])
    parser.add_argument("--ack-seconds", type=float, default=4.0)
    parser.add_argument("--stop-trials", type=int, default=30)
    parser.add_argument("--sweep-chats", type=int, default=100_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4],
                        help="worker processes of the scaling table")
    parser.add_argument("--listeners", type=int, nargs="+", default=[1, 2, 3],
                        help="listeners of the scaling table")
    parser.add_argument("--ack-burst", type=int, default=600,
                        help="messages sent at once for the frame ACK p99 of a burst")
    parser.add_argument("--overload-burst", type=int, default=3000,
                        help="messages sent at once, past what one listener takes in 1 s")
    parser.add_argument("--quota-burst", type=int, default=600,
                        help="messages of the burst under Feishu's default send quota")
    parser.add_argument("--quick", action="store_true",
                        help="only the main comparison (no events, scaling, sweep, RSS)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    results = run(args)
    print(f"\nbench {results['date']} on {results['machine']}\n")
    print(report.table(results))
    json_path, png = report.save(results, args.out)
    print(f"\nsaved {json_path}" + (f" and {png}" if png else " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
