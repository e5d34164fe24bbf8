"""One listener's ingest ceiling: the highest offered rate (events/s, on a fixed schedule)
at which its frame ACK p99 stays within 100 ms, taking one event per Redis step
(`FEISHU_INGEST_GROUP_MAX=1`: the listener before group commit) and taking the events that
arrive meanwhile together (the default), in one run. No worker runs: the turns wait in the
broker, so the listener has the cores to itself, as where the workers run elsewhere."""

from __future__ import annotations

from typing import Any

from bench import load
from bench.load import percentile
from bench.stack import Stack

RATES = (250, 500, 1000, 1500, 2000, 3000, 4000)
ACK_P99_MS = 100.0


def ceiling(st: Stack, tag: str, duration_s: float, **env: str) -> dict[str, Any]:
    """Rates tried (ACK p99 of each, ms) and the highest within ACK_P99_MS."""
    listener = st.listener(**env)
    tried: dict[str, float] = {}
    best = 0
    try:
        for rate in RATES:
            sent = load.paced(st.sim, load.chats(f"{tag}{rate}", 1000), rate, duration_s,
                              f"{tag}-{rate}")
            latencies, _ = load.ack_latencies_ms(st.sim, sent)
            p99 = percentile(latencies, 99)
            tried[str(rate)] = p99
            if p99 > ACK_P99_MS:
                break
            best = rate
    finally:
        listener.stop()
        st.wait_connections(0)
    return {"ack_p99_ms": tried, "ceiling_per_s": best}


def measure(st: Stack, duration_s: float = 2.0) -> dict[str, Any]:
    one = ceiling(st, "ing1", duration_s, FEISHU_INGEST_GROUP_MAX="1")
    grouped = ceiling(st, "ingg", duration_s)
    return {"one_per_step": one, "grouped": grouped}
