"""The read views (gateway/ops/cli/views.py) as tables and lines for people, with rich. An id
(chat, message, turn, task) is always printed whole on one line, never in a table that
would fold or shorten it on a narrow terminal: it is copied into `revoke` and `retry`."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from gateway.agents.report import summary


def _duration(seconds: float | None) -> str:
    """A duration as people read it ("42s", "17m", "3.5h"; "-" unknown): the one renderer
    of every "for", "up", "expires in" and "… ago" shown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m" if seconds < 7200 else f"{seconds / 3600:.1f}h"


def _since(at: Any, now: float) -> str:
    """How long ago epoch second `at` was ("never" when it was not)."""
    return "never" if not at else f"{_duration(now - float(at))} ago"


def _when(at_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at_ms / 1000))


def chat(console: Console, view: dict[str, Any]) -> None:
    turn = view["turn"]
    console.print(f"[bold]chat {view['chat_id']}[/bold]")
    if view["busy"] is not None:
        console.print(f"  busy mode: {view['busy']} (kept in Redis by its last message)")
    else:
        console.print("  busy mode: none kept (the chat is idle; its next message brings the "
                      f"listeners' mode; this shell's settings say {view['busy_here']})")
    if turn is None:
        console.print("  turn: idle")
    else:
        stopping = " [yellow](asked to stop)[/yellow]" if turn["stopping"] else ""
        task = f" (task {turn['task_id']})" if turn["task_id"] not in (None,
                                                                        turn["turn_id"]) else ""
        console.print(f"  turn: {turn['state']} {turn['turn_id']}{task}{stopping}")
        console.print(f"        message {turn['message_id']}, fence {turn['fence']} (the "
                      "lease's token: a turn of another fence can no longer reply), worker "
                      f"{turn['worker'] or '-'}, for {_duration(turn['for_s'])}, attempt "
                      f"{turn['attempt']}, published {turn['requeues'] + 1}x, lease "
                      f"{turn['lease_ttl_s']:.1f}s left")
        if turn["merged"]:
            console.print(f"        answers {len(turn['merged'])} messages together: "
                          f"{' '.join(turn['merged'])}")
    pending = view["pending"]
    console.print(f"  pending: {pending['count']}")
    for m in pending["first"]:
        retry = f" (retry {m['retry']})" if m["retry"] else ""
        text = "(unreadable entry)" if m["text"] is None else repr(m["text"])
        console.print(f"    {m['message_id']} from {m['sender'] or '-'}{retry}: {text}",
                      markup=False)
    if pending["count"] > len(pending["first"]):
        console.print(f"    … and {pending['count'] - len(pending['first'])} more")
    session = view["session"]
    ttl = f", expires in {_duration(session['ttl_s'])}" if session["ttl_s"] else ""
    console.print(f"  session: generation {session['generation']} (each /new starts the "
                  f"next: a new conversation){ttl}")
    if view["history"]:
        console.print("  last turns, newest first:")
        for r in view["history"]:
            retryable = " (retryable)" if r["retryable"] else ""
            console.print(f"    {_when(r['at_ms'])} {r['outcome']}{retryable}, attempts "
                          f"{r['attempts']}: {r['turn_id']}", markup=False)
            if r.get("reactions"):
                console.print("      reactions: " + ", ".join(
                    f"{x['emoji']} by {x['by']}" for x in r["reactions"]), markup=False)
    else:
        console.print("  last turns: none on record")
    for u in view["undelivered"]:
        console.print(f"  undelivered: {u.get('message_id')} ({u.get('purpose')}): "
                      f"{u.get('error')}", markup=False)
    _topics(console, view.get("topics"))


def _topics(console: Console, topics: list[dict[str, Any]] | None) -> None:
    if topics is None:
        return
    console.print(f"  topics with a turn or waiting messages: {len(topics)}")
    for row in topics:
        turn = "idle" if row["state"] == "idle" else \
            f"{row['state']} {row['message_id'] or '-'} for {_duration(row['for_s'])}"
        console.print(f"    {row['chat_id']}: {turn}, {row['pending']} pending", markup=False)


def each_chat(console: Console, views: list[dict[str, Any]]) -> None:
    """Every bot's state of one chat (several apps), one after the other."""
    for view in views:
        chat(console, view)


def chats(console: Console, view: dict[str, Any]) -> None:
    if not view["total"]:
        console.print("no chat is active (no turn runs, no message waits)")
        return
    console.print(f"active chats: {view['total']}, {view['running']} running (page "
                  f"{view['page']}, busiest first)")
    for row in view["chats"]:
        turn = "idle" if row["state"] == "idle" else f"{row['state']} for " \
            f"{_duration(row['for_s'])}"
        task = f", task {row['task_id']}" if row["task_id"] else ""
        console.print(f"  {row['chat_id']}: {row['pending']} pending, {turn}{task}",
                      markup=False)
    shown = (view["page"] - 1) * view["limit"] + len(view["chats"])
    if shown < view["total"]:
        console.print(f"more: --page {view['page'] + 1}")
    if view["truncated"]:
        console.print("(only the first chats of each index were ranked)")


def status(console: Console, view: dict[str, Any]) -> None:
    r = view["redis"]
    console.print(f"redis: {r['version']}, {r['used_memory_human']} used, ping "
                  f"{r['ping_ms']}ms, aof {'on' if r['aof'] else 'off'}")
    workers = view["workers"]
    if isinstance(workers, str):
        console.print(f"workers: unknown ({workers})", markup=False)
    elif not workers:
        console.print("workers: [red]none answered[/red]")
    else:
        table = Table("worker", "pool", "concurrency", "tasks", "up",
                      title=f"workers: {len(workers)}", title_justify="left")
        for w in workers:
            table.add_row(w["name"], w["pool"] or "-", str(w["concurrency"] or "-"),
                          str(w["tasks"]), _duration(w["uptime_s"]))
        console.print(table)
    queues = view["queues"]
    console.print("queues: " + (queues if isinstance(queues, str) else ", ".join(
        f"{name} {'?' if n is None else n}" for name, n in queues.items())), markup=False)
    c = view["chats"]
    console.print(f"chats: {c['active']} active, {c['running']} running, "
                  f"{c['waiting']} messages waiting")
    _connections(console, view["connections"])
    agents = view["agents"]
    if not agents:
        console.print("agents: no worker process reported (none ran a turn yet)")
    else:
        console.print(f"agents, per worker process ({len(agents)}): cached = kept in memory; "
                      "let go = why they left (cap: over GATEWAY_AGENT_CACHE_CAP, idle: "
                      "unused, new: /new, config: a changed configuration); released soft = "
                      "memory dropped, the session kept, hard = ended; config = the hash of "
                      "the configuration they were built under")
    for owner, figures in sorted(agents.items()):
        console.print(f"  {owner}: {summary(figures)}", markup=False)
    undelivered = view["undelivered"]
    console.print(f"undelivered replies: {undelivered['count']}")
    for u in undelivered["newest"]:
        console.print(f"  {u.get('message_id')} in chat {u.get('chat_id')} "
                      f"({u.get('purpose')}): {u.get('error')}", markup=False)


def _connections(console: Console, connections: dict[str, dict[str, Any]]) -> None:
    if not connections:
        console.print("connections: no listener reported")
        return
    now = time.time()
    console.print(f"connections, per listener and app ({len(connections)}):")
    for owner, c in sorted(connections.items()):
        detail = f" ({c['detail']})" if c.get("detail") else ""
        if c.get("identity_known") is False:
            detail += "; bot identity unknown (group @mentions wait unacknowledged)"
        console.print(f"  {owner}: {c.get('state')} since {_since(c.get('since'), now)}"
                      f"{detail}; last frame {_since(c.get('last_frame_at'), now)}, last "
                      f"event {_since(c.get('last_event_at'), now)}, "
                      f"{c.get('reconnects', 0)} reconnects (as reported "
                      f"{_since(c.get('at'), now)})",
                      markup=False)
