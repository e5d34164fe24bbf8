"""Each contender measured the same way: a burst over 100 chats (msgs/s, latency), one message
at a time (round trip), and frame ACK latency at offered loads."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import redis

from bench import load, raw
from bench.agents import STARTS_KEY
from bench.cpu import CpuMeter
from bench.load import Sent, percentile
from bench.stack import Stack
from gateway.chats.keys import Keyspace
from gateway.ops.processes import LISTENER_ARGV, LISTENER_READY, wait_until

Figures = dict[str, Any]


def _summary(latencies: list[float]) -> Figures:
    return {"p50_ms": percentile(latencies, 50), "p99_ms": percentile(latencies, 99),
            "samples": latencies}


def raw_celery(st: Stack, burst: int, singles: int) -> Figures:
    """Raw Celery no-op tasks: tasks/s of a burst, and the round trip of one at a time."""
    worker = st.worker(app="bench.raw")
    try:
        client = redis.Redis.from_url(st.redis_server.url)
        for _ in range(20):  # warm up
            raw.noop.apply_async((time.time(),))
        wait_until(lambda: client.llen(raw.DONE_KEY) >= 20, 30, "warm-up tasks")
        client.delete(raw.DONE_KEY)
        st.reset_stats()
        cpu = CpuMeter({"worker": [worker.pid], "redis": [st.redis_pid]}).start()
        first = time.time()
        for _ in range(burst):
            raw.noop.apply_async((time.time(),))
        wait_until(lambda: client.llen(raw.DONE_KEY) >= burst, 120, "the burst of tasks")
        cpu_ms = cpu.per_message(burst)
        done = [tuple(map(float, r.split())) for r in client.lrange(raw.DONE_KEY, 0, -1)]
        commands = st.command_calls() / burst
        client.delete(raw.DONE_KEY)
        singles_ms = []
        for _ in range(singles):
            raw.noop.apply_async((time.time(),))
            item = client.blpop([raw.DONE_KEY], timeout=10)
            assert item is not None, "a raw task did not finish"
            sent, finished = map(float, item[1].split())
            singles_ms.append((finished - sent) * 1000)
        return {"msgs_per_s": burst / (max(d for _, d in done) - first),
                "burst": _summary([(d - s) * 1000 for s, d in done]),
                "single": _summary(singles_ms), "redis_commands_per_msg": commands,
                "cpu_ms_per_msg": cpu_ms}
    finally:
        worker.stop()


def _burst_and_singles(st: Stack, tag: str, burst: int, singles: int,
                       roles: dict[str, list[int]]) -> Figures:
    chat_ids = load.chats(tag, 100)
    warm = load.burst(st.sim, chat_ids, 100, f"{tag}-warm")
    load.reply_times(st.sim, warm, 60)
    st.reset_stats()
    cpu = CpuMeter(roles).start()
    sent = load.burst(st.sim, chat_ids, burst, tag)
    done = load.reply_times(st.sim, sent, 300)
    cpu_ms = cpu.per_message(burst)
    commands = st.command_calls() / burst
    breakdown = st.command_breakdown()
    st.reset_stats()
    singles_ms = load.one_at_a_time(st.sim, f"oc_{tag}_single", singles)
    return {"msgs_per_s": load.throughput(sent, done), "answered": len(done),
            "burst": _summary(load.latencies_ms(sent, done)), "single": _summary(singles_ms),
            "redis_commands_per_msg": commands, "redis_commands": breakdown,
            "cpu_ms_per_msg": cpu_ms,
            "redis_commands_per_single": st.command_calls() / max(singles, 1)}


def naive_bot(st: Stack, burst: int, singles: int) -> Figures:
    bot = st.client_process("naive")
    try:
        return _burst_and_singles(st, "naive", burst, singles, {"bot": [bot.pid]})
    finally:
        bot.stop()
        st.wait_connections(0)


def celery_bot(st: Stack, burst: int, singles: int) -> Figures:
    """The Celery reply bot (bench/celery_bot.py): the SDK's listener, a task per message."""
    worker = st.worker(app="bench.celery_bot")
    bot = st.client_process("celery")
    try:
        return _burst_and_singles(st, "celerybot", burst, singles,
                                  {"listener": [bot.pid], "worker": [worker.pid],
                                   "redis": [st.redis_pid]})
    finally:
        bot.stop()
        worker.stop()
        st.wait_connections(0)


def acks(st: Stack, tag: str, rates: tuple[int, ...], duration_s: float, *,
         drain: bool = False) -> Figures:
    """Frame ACK latency at each offered rate (whoever is connected); with `drain`, wait
    for every answer before the next rate."""
    out: Figures = {}
    for rate in rates:
        sent = load.paced(st.sim, load.chats(f"{tag}{rate}", 100), rate, duration_s,
                          f"{tag}-{rate}")
        latencies, handler = load.ack_latencies_ms(st.sim, sent)
        out[str(rate)] = {**_summary(latencies), "handler_p99_ms": percentile(handler, 99)}
        if drain:
            load.reply_times(st.sim, sent, 300)
    return out


def bare_sdk_acks(st: Stack, rates: tuple[int, ...], duration_s: float) -> Figures:
    client = st.client_process("noop")
    try:
        return acks(st, "noop", rates, duration_s)
    finally:
        client.stop()
        st.wait_connections(0)


def stop_to_next(st: Stack, trials: int) -> Figures:
    """/stop of a cooperative turn → the chat's next message starts (by the agent's clock)."""
    took = []
    for n in range(trials):
        chat = f"oc_stop_{n:03d}"
        waiting = st.sim.send_text(chat, "wait")
        wait_until(partial(st.client.hexists, STARTS_KEY, waiting), 30, "the turn to run")
        following = st.sim.send_text(chat, f"mark {n}")
        at = time.time()
        st.sim.send_text(chat, "/stop")
        started = wait_until(partial(st.client.hget, STARTS_KEY, following), 30,
                             "the next turn to start")
        took.append((float(str(started)) - at) * 1000)
    return _summary(took)


def finished_chat_bytes(st: Stack, chats: int) -> Figures:
    """Bytes Redis keeps per chat once its turns are done: dedupe marks apart."""
    chat_ids = load.chats("idle", chats)
    sent: list[Sent] = load.burst(st.sim, chat_ids, chats, "idle")
    load.reply_times(st.sim, sent, 120)
    wait_until(lambda: all(not st.client.exists(f"gw:{{{c}}}:lease") for c in chat_ids), 60,
               "every chat to go idle")
    marks = history = other = unbounded = 0
    for chat in chat_ids:
        for key in st.client.scan_iter(match=f"gw:{{{chat}}}:*", count=1000):
            size = int(st.client.memory_usage(key, samples=0) or 0)
            if ":seen:" in key:
                marks += size
            elif key.endswith(":done"):
                history += size
            else:
                other += size
            if st.client.ttl(key) == -1:
                unbounded += 1
    index = Keyspace().actives(st.sim.app_id)
    return {"bytes_per_chat": other / chats, "dedupe_bytes_per_message": marks / chats,
            "history_bytes_per_chat": history / chats, "keys_without_ttl": unbounded,
            "active_index_bytes": sum(int(st.client.memory_usage(k, samples=0) or 0)
                                      for k in index),
            "active_index_chats": sum(int(st.client.zcard(k)) for k in index)}


def overload(st: Stack, count: int, tag: str = "over") -> Figures:
    """A burst sent at once (past what the listener takes in its wait bound, for the
    overload row): every frame's ACK (the slowest, and how many were refused to be sent
    again), and every message answered once."""
    if count <= 0:
        return {"messages": 0}
    before = len(st.sim.acks)
    sent = load.burst(st.sim, load.chats(tag, 100), count, tag)
    done = load.reply_times(st.sim, sent, 300)
    acks = [a for a in st.sim.acks[before:] if a.message_id]
    latencies = [a.latency_ms for a in acks]
    first: dict[str, float] = {}
    for a in acks:
        first.setdefault(a.message_id or "", a.latency_ms)
    return {"messages": count, "answered": len(done),
            "ack_first": _summary(list(first.values())),
            "ack_max_ms": max(latencies, default=float("nan")),
            "refused": sum(1 for a in acks if a.code != 200)}


def gateway(st: Stack, burst: int, singles: int, rates: tuple[int, ...],
            duration_s: float, stop_trials: int, overload_burst: int,
            ack_burst: int) -> Figures:
    worker = st.worker()
    env: dict[str, str] = {}
    listener = st.listener(**env)
    try:
        figures = _burst_and_singles(st, "gw", burst, singles,
                                     {"listener": [listener.pid], "worker": [worker.pid],
                                      "redis": [st.redis_pid]})
        figures["acks"] = acks(st, "gwack", rates, duration_s, drain=True)
        figures["ack_burst"] = overload(st, ack_burst, "ackb")
        figures["overload"] = overload(st, overload_burst)
        figures["stop_to_next"] = stop_to_next(st, stop_trials)
        figures.update(finished_chat_bytes(st, 500))
        return figures
    finally:
        listener.stop()
        worker.stop()
        st.wait_connections(0)


def gateway_burst(st: Stack, burst: int, concurrency: int, tag: str, *, listeners: int = 1,
                  **env: str) -> Figures:
    """Only the burst (the scaling and task-events comparisons): msgs/s, the frames' ACK
    p99, and CPU ms per message of the listeners and of the worker."""
    worker = st.worker(concurrency, **env)
    started = [st.listener(**env)]
    try:
        for _ in range(listeners - 1):
            started.append(st.start("listener", LISTENER_ARGV, LISTENER_READY, **env))
        st.wait_connections(listeners)
        chat_ids = load.chats(tag, 100)
        warm = load.burst(st.sim, chat_ids, 100, f"{tag}-warm")
        load.reply_times(st.sim, warm, 60)
        cpu = CpuMeter({"listeners": [p.pid for p in started], "worker": [worker.pid]}).start()
        sent = load.burst(st.sim, chat_ids, burst, tag)
        done = load.reply_times(st.sim, sent, 300)
        cpu_ms = cpu.per_message(burst)
        latencies, _ = load.ack_latencies_ms(st.sim, sent)
        return {"msgs_per_s": load.throughput(sent, done), "answered": len(done),
                "ack_p99_ms": percentile(latencies, 99), "cpu_ms_per_msg": cpu_ms}
    finally:
        for listener in started:
            listener.stop()
        worker.stop()
        st.wait_connections(0)
