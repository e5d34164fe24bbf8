"""One listener's ingest ceiling: the highest offered rate (events/s, on a fixed schedule)
at which its frame ACK p99 stays within 100 ms, taking one event per Redis step
(`FEISHU_INGEST_GROUP_MAX=1`: the listener before group commit) and taking the events that
arrive meanwhile together (the default), in one run. No worker runs: the turns wait in the
broker, so the listener has the cores to itself, as where the workers run elsewhere; then
they and their chats are deleted, so no later measure waits behind them."""

from __future__ import annotations

from typing import Any

from bench import load
from bench.load import percentile
from bench.stack import Stack
from gateway.broker.names import TURNS_QUEUE
from gateway.chats.keys import INDEX_KEY
from gateway.ops.processes import wait_until

RATES = (250, 500, 1000, 1500, 2000, 3000, 4000)
ACK_P99_MS = 100.0


def ceiling(st: Stack, tag: str, duration_s: float, **env: str) -> dict[str, Any]:
    """Rates tried (ACK p99 of each, ms) and the highest within ACK_P99_MS."""
    listener = st.listener(**env)
    tried: dict[str, float] = {}
    best = 0
    try:
        _settled(st, load.paced(st.sim, load.chats(f"{tag}w", 100), 250, 1.0, f"{tag}-w"))
        for rate in RATES:
            sent = load.paced(st.sim, load.chats(f"{tag}{rate}", 1000), rate, duration_s,
                              f"{tag}-{rate}")
            latencies, _ = load.ack_latencies_ms(st.sim, sent)
            _settled(st, sent)  # (what was refused, delivered again and taken)
            p99 = percentile(latencies, 99)
            tried[str(rate)] = p99
            if p99 > ACK_P99_MS:
                break
            best = rate
    finally:
        listener.stop()
        st.wait_connections(0)
    return {"ack_p99_ms": tried, "ceiling_per_s": best}


def _settled(st: Stack, sent: list[load.Sent]) -> None:
    """Wait until every sent event was taken (ACKed 200, maybe after being refused and
    delivered again), so none is left to land on the next measure."""
    wanted = {s.message_id for s in sent}
    wait_until(lambda: wanted <= {a.message_id for a in st.sim.acks if a.code == 200}, 120,
               "every event to be taken")


def _forget(st: Stack, prefix: str) -> None:
    """Delete the chats whose ids begin with `prefix` and every turn waiting in the broker."""
    client = st.client
    for pattern in (f"gw:{{{prefix}*", f"{TURNS_QUEUE}*"):
        keys = list(client.scan_iter(match=pattern, count=1000))
        for at in range(0, len(keys), 1000):
            client.delete(*keys[at:at + 1000])
    chats = [str(c) for c in client.zrange(INDEX_KEY, 0, -1) if str(c).startswith(prefix)]
    for at in range(0, len(chats), 1000):
        client.zrem(INDEX_KEY, *chats[at:at + 1000])


def measure(st: Stack, duration_s: float = 2.0) -> dict[str, Any]:
    try:
        one = ceiling(st, "ing1", duration_s, FEISHU_INGEST_GROUP_MAX="1")
        grouped = ceiling(st, "ingg", duration_s)
    finally:
        _forget(st, "oc_ing")
    return {"one_per_step": one, "grouped": grouped}
