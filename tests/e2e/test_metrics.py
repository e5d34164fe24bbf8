"""The Prometheus endpoints of a listener and of a prefork worker host: the named series are
there and they move when traffic flows (real listener, real workers, simulator)."""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.core import metrics
from gateway.ops.embedded_redis import free_port
from gateway.ops.processes import wait_until
from tests.support.replies import agent_events, reply_of, started
from tests.support.rig import Rig, rig_up

MERGING_CHAT = "oc_metrics_merging"


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    # the multiprocess folder is the worker's alone (docs/operating.md, Metrics)
    metrics_dir = str(tmp_path_factory.mktemp("metrics"))
    with rig_up(tmp_path_factory, worker_env={"PROMETHEUS_MULTIPROC_DIR": metrics_dir},
                GATEWAY_METRICS_PORT=str(free_port()),
                GATEWAY_WORKER_METRICS_PORT=str(free_port()), FEISHU_GROUP_POLICY="disabled",
                FEISHU_TYPING="false", GATEWAY_MERGE_WINDOW_MS="300",
                FEISHU_GROUP_RULES=json.dumps({MERGING_CHAT: {"busy": "merge"}})) as rig:
        yield rig


def scrape(port: str) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def value(text: str, series: str) -> float:
    """The sum of every sample of `series` whose name and labels start as given."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(series):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_listeners_series_move_with_traffic(rig: Rig) -> None:
    port = rig.env["GATEWAY_METRICS_PORT"]
    up = f'gateway_connection_up{{app="{rig.sim.app_id}"}}'
    # (the simulator sees the connection a moment before the listener's own state says so)
    before = str(wait_until(lambda: text if value(text := scrape(port), up) == 1.0 else None,
                            10, "the listener's connection up in its metrics"))
    assert "gateway_reconnects_total" in before
    chat_id = "oc_metrics_listener"
    first = rig.sim.send_text(chat_id, "one")
    reply_of(rig.sim, chat_id, first)
    rig.sim.redeliver(first)
    rig.sim.send_text("oc_metrics_group", "hello all", chat_type="group")

    def moved() -> bool:
        now = scrape(port)
        return (value(now, 'gateway_events_total{outcome="claimed"}') >= 1
                and value(now, 'gateway_events_total{outcome="duplicate"}') >= 1
                and value(now, 'gateway_events_refused_total{reason="groups-disabled"}') >= 1
                and value(now, 'gateway_ack_seconds_count{code="200"}') >= 3)

    wait_until(moved, 20, "the listener's counters to move")


def test_the_worker_hosts_series_sum_every_pool_process(rig: Rig) -> None:
    port = rig.env["GATEWAY_WORKER_METRICS_PORT"]
    before = scrape(port)
    replied = value(before, 'gateway_turn_seconds_count{outcome="replied"}')
    chats = [f"oc_metrics_w{n}" for n in range(4)]
    sent = {chat: rig.sim.send_text(chat, "sleep 0.5") for chat in chats}
    client = rig.client()
    wait_until(lambda: all(started(client, c, m) for c, m in sent.items()), 20, "turns")
    for chat, message_id in sent.items():
        reply_of(rig.sim, chat, message_id)

    def counted() -> str | None:
        now = scrape(port)
        done = value(now, 'gateway_turn_seconds_count{outcome="replied"}') - replied
        reported = value(now, "gateway_agents_cached") >= 1  # (every 10 s)
        return now if done >= len(chats) and reported else None

    after = wait_until(counted, 30, "every turn counted and the agents reported")
    assert isinstance(after, str)
    assert value(after, "gateway_turn_queue_seconds_count") >= len(chats)
    assert "gateway_ack_seconds" not in after, "the listener's figures are its own"
    for name in ("gateway_send_retries_total", "gateway_rate_limit_wait_seconds_total",
                 "gateway_replies_undelivered_total", 'gateway_agent_releases_total{how="soft"}'):
        assert re.search(rf"^{re.escape(name)} ", after, re.M), name


def test_agents_of_a_pool_process_killed_without_a_word_stop_counting(rig: Rig) -> None:
    """A pool process SIGKILLed (an OOM kill) never runs its shutdown hook: its agents are
    gone, and the host's gauge must drop them at the next scrape."""
    port = rig.env["GATEWAY_WORKER_METRICS_PORT"]
    chats = [f"oc_metrics_killed{n}" for n in range(4)]
    sent = {chat: rig.sim.send_text(chat, "sleep 0.3") for chat in chats}
    for chat, message_id in sent.items():
        reply_of(rig.sim, chat, message_id)
    wait_until(lambda: value(scrape(port), "gateway_agents_cached") >= len(chats), 30,
               "the agents reported (every 10 s)")
    client = rig.client()
    pids = {e["pid"] for chat in chats for e in agent_events(client, chat)}
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: value(scrape(port), "gateway_agents_cached") == 0, 10,
               "the killed processes' agents to stop counting")



def test_a_worker_multiprocess_folder_that_cannot_be_used_is_one_line_not_a_crash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(a_file))
    assert metrics.serve_worker(free_port(), "127.0.0.1", str(a_file)) is False
    [record] = [r for r in caplog.records if r.name == "gateway.core.metrics"]
    assert f"PROMETHEUS_MULTIPROC_DIR={a_file} cannot be used" in record.getMessage()


def test_messages_answered_together_are_counted(rig: Rig) -> None:
    port = rig.env["GATEWAY_WORKER_METRICS_PORT"]
    series = 'gateway_messages_merged_total{outcome="replied"}'
    before = value(scrape(port), series)
    sent = [rig.sim.send_text(MERGING_CHAT, f"part {n}") for n in range(3)]
    reply = reply_of(rig.sim, MERGING_CHAT, sent[-1])
    assert all(f"part {n}" in reply for n in range(3)), reply
    wait_until(lambda: value(scrape(port), series) - before >= 3, 20,
               "the three merged messages counted")
