"""The bench's table (targets beside measured values), its JSON and its latency plot."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

Row = tuple[str, str, str, str]


def _f(value: float, unit: str = "") -> str:
    if isinstance(value, float) and math.isnan(value):
        return "n/a"
    return f"{value:,.2f}{unit}" if abs(value) < 100 else f"{value:,.0f}{unit}"


def _ok(met: bool) -> str:
    return "met" if met else "MISSED"


def rows(r: dict[str, Any]) -> list[Row]:
    raw, naive, gw = r["raw_celery"], r["naive_bot"], r["gateway"]
    sdk = r["bare_sdk_acks"]
    out: list[Row] = [
        ("raw Celery no-op, tasks/s (burst)", _f(raw["msgs_per_s"]), "", ""),
        ("naive bot, msgs/s (burst, 100 chats)", _f(naive["msgs_per_s"]), "", ""),
        ("gateway, msgs/s (burst, 100 chats)", _f(gw["msgs_per_s"]), "", ""),
    ]
    ratio_raw = gw["msgs_per_s"] / raw["msgs_per_s"]
    ratio_naive = gw["msgs_per_s"] / naive["msgs_per_s"]
    out += [("gateway / raw Celery msgs/s", _f(ratio_raw, "x"), ">= 0.6x (moonshot 0.8x)",
             _ok(ratio_raw >= 0.6)),
            ("gateway / naive bot msgs/s", _f(ratio_naive, "x"), ">= 1.0x",
             _ok(ratio_naive >= 1.0))]
    bot = r.get("celery_bot")
    if bot is not None:
        ratio_bot = gw["msgs_per_s"] / bot["msgs_per_s"]
        out += [("Celery reply bot (a task per message; no order, dedupe or recovery), msgs/s",
                 _f(bot["msgs_per_s"]), "", ""),
                ("gateway / Celery reply bot msgs/s", _f(ratio_bot, "x"), ">= 0.9x",
                 _ok(ratio_bot >= 0.9))]
    if "gateway_events" in r:
        ev = r["gateway_events"]["msgs_per_s"]
        out.append(("gateway with task events on, msgs/s", _f(ev),
                    f"cost {_f(100 * (1 - ev / r['gateway_no_events']['msgs_per_s']), ' %')}",
                    ""))
    single_gap = gw["single"]["p50_ms"] - raw["single"]["p50_ms"]
    out += [
        ("raw Celery round trip p50 / p99", f"{_f(raw['single']['p50_ms'], ' ms')} / "
         f"{_f(raw['single']['p99_ms'], ' ms')}", "", ""),
        ("gateway one message p50 / p99", f"{_f(gw['single']['p50_ms'], ' ms')} / "
         f"{_f(gw['single']['p99_ms'], ' ms')}", f"p50 <= raw + 2 ms "
         f"({_f(raw['single']['p50_ms'] + 2, ' ms')})", _ok(single_gap <= 2)),
        ("naive bot one message p50", _f(naive["single"]["p50_ms"], " ms"),
         f"gateway's p50 <= this + 1 ms ({_f(naive['single']['p50_ms'] + 1, ' ms')})",
         _ok(gw["single"]["p50_ms"] <= naive["single"]["p50_ms"] + 1)),
    ]
    if bot is not None:
        out.append(("Celery reply bot one message p50", _f(bot["single"]["p50_ms"], " ms"),
                    "", ""))
    for rate, sdk_acks in sdk.items():
        mine = gw["acks"][rate]
        out.append((f"ACK p99 at {rate} msgs/s: gateway / bare SDK (gateway's handler p99)",
                     f"{_f(mine['p99_ms'], ' ms')} / {_f(sdk_acks['p99_ms'], ' ms')} "
                     f"({_f(mine.get('handler_p99_ms', float('nan')), ' ms')})",
                     "<= SDK + 10 ms", _ok(mine["p99_ms"] <= sdk_acks["p99_ms"] + 10)))
    bursts: list[tuple[str, str, Callable[[dict[str, Any]], bool]]] = [
        ("ack_burst", "p99 <= 150 ms", lambda b: bool(b["ack_first"]["p99_ms"] <= 150)),
        ("overload", "no ACK over 1.5 s, all answered",
         lambda b: bool(b["ack_max_ms"] <= 1500 and b["answered"] == b["messages"]))]
    for name, target, met in bursts:
        burst = gw.get(name, {})
        if burst.get("messages"):
            out.append((f"a burst of {burst['messages']:,} at once: frame ACK p99 / slowest "
                        f"(refused, sent again; answered)",
                        f"{_f(burst['ack_first']['p99_ms'], ' ms')} / "
                        f"{_f(burst['ack_max_ms'], ' ms')} ({burst['refused']:,}; "
                        f"{burst['answered']:,})", target, _ok(met(burst))))
    cpu = [(name, figures.get("cpu_ms_per_msg", {})) for name, figures in
           (("raw Celery", raw), ("naive bot", naive), ("Celery reply bot", bot or {}),
            ("gateway", gw))]
    out.append(("CPU ms per message in the burst: " + ", ".join(
        f"{name} {role}" for name, roles in cpu for role in roles),
        " / ".join(_f(ms) for _, roles in cpu for ms in roles.values()), "stated", ""))
    total = {name: sum(roles.values()) for name, roles in cpu if roles}
    if "gateway" in total and "naive bot" in total:
        out.append(("CPU ms per message in the burst, all its processes (listener, worker and "
                    "Redis): gateway / naive bot" + (" / Celery reply bot" if bot else ""),
                    " / ".join(_f(total[n]) for n in ("gateway", "naive bot", "Celery reply bot")
                               if n in total),
                    "gateway <= naive bot", _ok(total["gateway"] <= total["naive bot"])))
    stop = gw["stop_to_next"]
    out += [
        ("/stop -> next turn started p50 / p99",
         f"{_f(stop['p50_ms'], ' ms')} / {_f(stop['p99_ms'], ' ms')}", "p99 <= 300 ms",
         _ok(stop["p99_ms"] <= 300)),
        ("Redis commands per message (gateway; scripts' inner calls included)",
         _f(gw["redis_commands_per_msg"]), "<= 20", _ok(gw["redis_commands_per_msg"] <= 20)),
        ("Redis commands per message to an idle chat (one at a time)",
         _f(gw.get("redis_commands_per_single", float("nan"))), "<= 30",
         _ok(gw.get("redis_commands_per_single", math.inf) <= 30)),
        ("Redis commands per task (raw Celery)", _f(raw["redis_commands_per_msg"]), "", ""),
        ("Redis bytes per finished chat: its turn history (one turn; GATEWAY_HISTORY_TURNS)",
         _f(gw.get("history_bytes_per_chat", float("nan"))), "stated", ""),
        ("Redis bytes per finished chat (no dedupe marks, no history)", _f(gw["bytes_per_chat"]),
         "<= 100, all with TTL", _ok(gw["bytes_per_chat"] <= 100 and
                                     gw["keys_without_ttl"] == 0)),
    ]
    if "active_index_bytes" in gw:
        out.append(("the index of active chats (catch-up), bytes in all (chats in it; capped by "
                    "FEISHU_CATCHUP_MAX_CHATS per shard and app, whatever the number of chats)",
                    f"{_f(gw['active_index_bytes'])} ({gw['active_index_chats']:,})", "stated",
                    ""))
    if "ingest" in r:
        one, grouped = r["ingest"]["one_per_step"], r["ingest"]["grouped"]
        ratio = grouped["ceiling_per_s"] / max(one["ceiling_per_s"], 1)
        out.append(("one listener's ingest ceiling, events/s with ACK p99 <= 100 ms: one "
                    "per step (FEISHU_INGEST_GROUP_MAX=1) / in groups (its last rate's p99)",
                    f"{one['ceiling_per_s']:,} / {grouped['ceiling_per_s']:,} ({_f(ratio, 'x')}"
                    f"; {_f(list(grouped['ack_p99_ms'].values())[-1], ' ms')})",
                    ">= 3x", _ok(ratio >= 3)))
    if "topics" in r:
        ratio = r["topics"]["ratio"]
        out.append(("order scope thread / chat (2,000 messages in 20 groups of 10 topics, the "
                    "chat steps one at a time): ingest/s, turns/s, Redis bytes a message left",
                    f"{_f(ratio['ingest_per_s'], 'x')} / {_f(ratio['turns_per_s'], 'x')} / "
                    f"{_f(ratio['redis_bytes_per_message'], 'x')}", "stated", ""))
    if "dedupe" in r:
        mine, before = r["dedupe"]["the gateway"], r["dedupe"]["key per id (the layout before)"]
        out.append(("dedupe mark bytes per message, a chat's 1 / 10 / 300 messages a day "
                    "(the layout before: key per id)",
                    f"{_f(mine['bytes_1_a_day'])} / {_f(mine['bytes_10_a_day'])} / "
                    f"{_f(mine['bytes_300_a_day'])} ({_f(before['bytes_10_a_day'])})",
                    "<= 60 (10 a day)", _ok(mine["bytes_10_a_day"] <= 60)))
    if r.get("quota", {}).get("messages"):
        q = r["quota"]
        without, with_ = q["without"]["replies_per_min"], q["with"]["replies_per_min"]
        out.append((f"replies/min, a burst of {q['messages']} under Feishu's default quota: "
                    "without / with typing reactions (reaction calls)",
                    f"{_f(without)} / {_f(with_)} ({q['with']['reaction_calls']})",
                    "with >= 0.9x without", _ok(with_ >= 0.9 * without)))
    for role, marks in r.get("rss_mb", {}).items():
        growth = marks["1000000"] - marks["10000"]
        out.append((f"{role} RSS 10k -> 1M chats", f"{_f(marks['10000'])} -> "
                    f"{_f(marks['1000000'])} MB", "growth <= 30 MB", _ok(growth <= 30)))
    if "scaling" in r:
        s = r["scaling"]
        out.append(("worker processes " + " / ".join(s) + ": msgs/s (ACK p99)",
                    " / ".join(f"{_f(v['msgs_per_s'])} ({_f(v.get('ack_p99_ms', math.nan))} ms)"
                               for v in s.values()), "stated", ""))
    if "listeners" in r:
        li = r["listeners"]
        out.append(("listeners " + " / ".join(li) + ": msgs/s (ACK p99; listener CPU ms/msg)",
                    " / ".join(f"{_f(v['msgs_per_s'])} ({_f(v['ack_p99_ms'])} ms; "
                               f"{_f(v['cpu_ms_per_msg']['listeners'])})" for v in li.values()),
                    "stated", ""))
    if "sweep" in r:
        sw = r["sweep"]
        left = sw.get("not_recovered", 0)
        value = f"{_f(sw['took_s'], ' s')}, {sw['published_twice']} twice" + (
            f", {left:,} not yet" if left else "")
        out.append((f"{sw['chats']:,} expired chats re-dispatched ({sw['sweepers']} sweepers)",
                    value, "<= 60 s, none twice", _ok(sw["took_s"] <= 60 and not left and
                                                     sw["published_twice"] == 0)))
    if "releases" in r:
        rel = r["releases"]
        out.append((f"one message p50 / p99: idle / behind {rel['backlog']} queued releases",
                    f"{_f(rel['idle_p50_ms'], ' ms')} / {_f(rel['idle_p99_ms'], ' ms')}; "
                    f"{_f(rel['backlog_p50_ms'], ' ms')} / {_f(rel['backlog_p99_ms'], ' ms')} "
                    f"({rel['releases_left_after_first_turn']} still queued after the first)",
                    "never behind the backlog (order)",
                    _ok(rel["releases_left_after_first_turn"] > 0)))
    return out


def table(r: dict[str, Any]) -> str:
    lines = ["| measure | value | target | |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(r)]
    return "\n".join(lines)


def _strip_samples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_samples(v) for k, v in value.items() if k != "samples"}
    return value


def save(r: dict[str, Any], out_dir: Path) -> tuple[Path, Path | None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "bench.json"
    json_path.write_text(json.dumps(_strip_samples(r), indent=2))
    return json_path, plot(r, out_dir / "latency.png")


def plot(r: dict[str, Any], path: Path) -> Path | None:
    """Latency distributions (CDF) of each contender; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    series = [("raw Celery burst", r["raw_celery"]["burst"]),
              ("naive bot burst", r["naive_bot"]["burst"]),
              *([("Celery reply bot burst", r["celery_bot"]["burst"])]
                if "celery_bot" in r else []),
              ("gateway burst", r["gateway"]["burst"])]
    for label, figures in series:
        _cdf(left, figures["samples"], label)
    left.set_title("per-message latency, burst over 100 chats")
    for rate, figures in r["bare_sdk_acks"].items():
        _cdf(right, figures["samples"], f"bare SDK ACK @{rate}/s")
        _cdf(right, r["gateway"]["acks"][rate]["samples"], f"gateway ACK @{rate}/s")
    right.set_title("frame ACK latency")
    for axis in (left, right):
        axis.set_xscale("log")
        axis.set_xlabel("ms")
        axis.set_ylabel("fraction of messages")
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cdf(axis: Any, samples: list[float], label: str) -> None:
    ordered = sorted(max(s, 1e-3) for s in samples)
    if ordered:
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)
