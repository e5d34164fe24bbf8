"""Mass recovery: N chats whose leases all expired at once, re-dispatched by the product's
own sweepers (one per process, as each listener and worker runs one).

`python -m bench.sweep` is one sweeper process (REDIS_URL in the env): it waits for the go
key, runs the real `Sweeper` until no chat is due, and prints how long it took.
"""

from __future__ import annotations

import contextlib
import time

import redis

from bench.stack import Stack
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.model import Message
from gateway.ops.processes import wait_until

GO_KEY = "bench:sweep:go"
BROKER_QUEUE = "gateway.turns"


def strand(client: redis.Redis, chats: int) -> None:
    """Admit one message in each of `chats` chats whose claim expires at once (never
    published, as after a listener fleet died between its Redis step and the publish)."""
    store = ChatStore(client, StoreConfig(claim_ttl_ms=1000))
    for n in range(chats):
        chat = f"oc_sweep_{n:06d}"
        store.inbox.ingest(Message(f"om_sweep_{n:06d}", chat, "p2p", "ou_x", "text", "hi"))


def measure(st: Stack, chats: int, sweepers: int) -> dict[str, float]:
    client = st.client
    client.delete(BROKER_QUEUE, GO_KEY)
    strand(client, chats)
    wait_until(lambda: not client.exists("gw:{oc_sweep_000000}:lease"), 30, "the claims to end")
    procs = [st.start("sweeper", ["-m", "bench.sweep"], "sweeper ready") for _ in
             range(sweepers)]
    try:
        time.sleep(1.5)  # every lease is gone by now (their TTL was 1 s)
        start = time.monotonic()
        client.set(GO_KEY, "1")

        def recovered() -> bool:
            return bool(client.llen(BROKER_QUEUE) >= chats)

        # on a timeout it is reported as it is: the time, and how many were re-dispatched
        with contextlib.suppress(TimeoutError):
            wait_until(recovered, 600, f"{chats} chats re-dispatched", interval_s=0.1)
        took = time.monotonic() - start
        time.sleep(5)  # a few more sweeps: copies published after the fact count too
        published = int(client.llen(BROKER_QUEUE))
    finally:
        for proc in procs:
            proc.stop()
    client.flushdb()  # the bench's own Redis: nothing else lives there
    return {"chats": chats, "sweepers": sweepers, "took_s": took, "published": published,
            "published_twice": max(published - chats, 0),
            "not_recovered": max(chats - published, 0)}


def main() -> None:
    from gateway.chats.sweeper import Sweeper
    from gateway.core.settings import load_settings
    from gateway.runtime import Runtime
    from tasks import app

    rt = Runtime(load_settings(), app)
    rt.redis.ping()
    print("sweeper ready", flush=True)
    while not rt.redis.exists(GO_KEY):
        time.sleep(0.001)
    sweeper = Sweeper(rt.store, rt.publisher, rt.settings.sweep_interval_s).start()
    try:
        while True:
            time.sleep(0.5)
    finally:
        sweeper.stop()


if __name__ == "__main__":
    main()
