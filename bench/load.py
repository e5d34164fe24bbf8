"""Offering messages to whatever is connected to the simulator, and reading the figures back."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gateway.simulator import Simulator


@dataclass(frozen=True)
class Sent:
    message_id: str
    at: float


def chats(prefix: str, count: int) -> list[str]:
    return [f"oc_{prefix}_{n:04d}" for n in range(count)]


def burst(sim: Simulator, chat_ids: Sequence[str], count: int, tag: str) -> list[Sent]:
    """`count` messages round-robin over the chats, as fast as the simulator sends."""
    out = []
    for n in range(count):
        at = time.time()
        out.append(Sent(sim.send_text(chat_ids[n % len(chat_ids)], f"{tag} {n}"), at))
    return out


def one_at_a_time(sim: Simulator, chat_id: str, count: int) -> list[float]:
    """`count` messages to one chat, each sent once the one before was answered; the round
    trip of each (ms, by the simulator's clock of the reply)."""
    took = []
    for n in range(count):
        at = time.time()
        message_id = sim.send_text(chat_id, f"single {n}")
        replies = sim.wait_for_messages(n + 1, chat_id=chat_id, timeout_s=30)
        reply = next(m for m in replies if m.reply_to == message_id)
        took.append((reply.at - at) * 1000)
    return took


def paced(sim: Simulator, chat_ids: Sequence[str], rate: float, duration_s: float,
          tag: str) -> list[Sent]:
    """Messages at `rate` per second for `duration_s`, on a fixed schedule (no drift)."""
    out = []
    start = time.monotonic()
    for n in range(int(rate * duration_s)):
        delay = start + n / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        at = time.time()
        out.append(Sent(sim.send_text(chat_ids[n % len(chat_ids)], f"{tag} {n}"), at))
    return out


def reply_times(sim: Simulator, sent: Iterable[Sent], timeout_s: float) -> dict[str, float]:
    """When each sent message got its (first) reply; waits until all did or the timeout."""
    wanted = {s.message_id for s in sent}
    deadline = time.monotonic() + timeout_s
    while True:
        got: dict[str, float] = {}
        for m in sim.sent_messages():
            if m.reply_to in wanted and m.reply_to not in got:
                got[m.reply_to] = m.at
        if len(got) == len(wanted) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def ack_latencies_ms(sim: Simulator, sent: Iterable[Sent],
                     timeout_s: float = 30) -> tuple[list[float], list[float]]:
    """The ACK latency of each sent message's first frame (as the simulator measured it),
    and the handler's own time in it (the SDK's biz_rt header, whole ms)."""
    wanted = {s.message_id for s in sent}
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, tuple[float, float]] = {}
        for ack in sim.acks:
            if ack.message_id in wanted and ack.message_id not in found:
                found[ack.message_id] = (ack.latency_ms, float(ack.biz_rt_ms or 0))
        if len(found) == len(wanted) or time.monotonic() > deadline:
            return [a for a, _ in found.values()], [b for _, b in found.values()]
        time.sleep(0.05)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def throughput(sent: Sequence[Sent], done: dict[str, float]) -> float:
    """Messages per second from the first send to the last answer."""
    if not done:
        return 0.0
    return len(done) / max(max(done.values()) - min(s.at for s in sent), 1e-9)


def latencies_ms(sent: Iterable[Sent], done: dict[str, float]) -> list[float]:
    return [(done[s.message_id] - s.at) * 1000 for s in sent if s.message_id in done]
