"""Replies per minute under Feishu's default send quota (50 a second, 1,000 a minute per
app), with and without typing reactions: the reactions draw from the same quota, and yield
to replies that wait for it, so they should cost the replies (almost) nothing."""

from __future__ import annotations

from typing import Any

from bench import load
from bench.stack import Stack

DEFAULT_QUOTA = {"FEISHU_SEND_RATE_PER_S": "50", "FEISHU_SEND_RATE_PER_MIN": "1000",
                 "FEISHU_CHAT_SEND_RATE_PER_S": "5"}


def replies_per_minute(st: Stack, messages: int, *, typing: bool, tag: str) -> dict[str, Any]:
    """A burst of `messages` over 100 chats under the default quota: replies per minute
    from the first send to the last reply, and the reaction calls Feishu saw."""
    env = {**DEFAULT_QUOTA, "FEISHU_TYPING": "true" if typing else "false"}
    st.client.delete(*(st.client.keys("gw:quota:*") or ["gw:quota:none"]))  # a full quota
    worker = st.worker(2, **env)
    listener = st.listener(**env)
    try:
        sent = load.burst(st.sim, load.chats(tag, 100), messages, tag)
        done = load.reply_times(st.sim, sent, 600)
        reactions = sum(st.sim.requests_count(f"/open-apis/im/v1/messages/{s.message_id}/"
                                              "reactions") for s in sent)
        return {"replies_per_min": 60 * load.throughput(sent, done), "answered": len(done),
                "reaction_calls": reactions}
    finally:
        listener.stop()
        worker.stop()
        st.wait_connections(0)


def measure(st: Stack, messages: int) -> dict[str, Any]:
    if messages <= 0:
        return {"messages": 0}
    return {"messages": messages,
            "without": replies_per_minute(st, messages, typing=False, tag="qt0"),
            "with": replies_per_minute(st, messages, typing=True, tag="qt1")}
