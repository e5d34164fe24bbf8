"""Our own long connection against the simulator, in a listener process: a silent socket is
declared dead and rebuilt, several apps share one listener, late events are told so, and
`feishu-gateway status` shows each connection."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from gateway.listener.desk import LATE_NOTICE
from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from tests.support.replies import replies_to
from tests.support.rig import EDGE_PING_S, EDGE_SECOND_APP, Rig

PING_INTERVAL_S = PING_TIMEOUT_S = EDGE_PING_S
SECOND_APP, SECOND_SECRET, SECOND_BOT = EDGE_SECOND_APP


@pytest.fixture
def rig(edge: Rig) -> Rig:
    return edge


def answered(sim: Simulator, chat_id: str, message_ids: list[str], timeout_s: float = 30) -> None:
    wait_until(lambda: set(message_ids) <= set(replies_to(sim, chat_id)), timeout_s,
               "every reply")


def test_a_silent_connection_is_declared_dead_rebuilt_and_nothing_after_is_lost(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_silent_chat"
    before = [sim.send_text(chat, "before")]
    answered(sim, chat, before)
    went_silent = time.monotonic()
    assert sim.go_silent() == 2, "both apps' connections"
    sim.wait_connected(2, timeout_s=PING_INTERVAL_S + PING_TIMEOUT_S + 10)
    took_s = time.monotonic() - went_silent
    # dead within interval + timeout (+ the reconnect's backoff, at most the simulator's
    # ReconnectInterval of 1 s, and scheduling)
    assert took_s < PING_INTERVAL_S + PING_TIMEOUT_S + 1 + 1.5, took_s
    log = rig.fleet.logs("listener")
    assert "no pong or data within" in log or "keepalive ping timeout" in log
    after = [sim.send_text(chat, f"after {n}") for n in range(5)]
    answered(sim, chat, after)
    replies = replies_to(sim, chat)
    assert [replies[m] for m in after] == [[f"echo: after {n}"] for n in range(5)]


def test_a_silent_connection_whose_reconnect_is_refused_heals_once_feishu_accepts(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_silent_refused"
    sim.refuse_endpoint(1000040350)
    try:
        sim.go_silent()
        wait_until(lambda: rig.fleet.logs("listener").count("code 1000040350") >= 4, 30,
                   "both apps to retry the refused endpoint")
        assert sim.connection_count == 0
    finally:
        sim.refuse_endpoint(None)
    sim.wait_connected(2, timeout_s=30)
    after = [sim.send_text(chat, f"after {n}") for n in range(3)]
    answered(sim, chat, after)
    assert [replies_to(sim, chat)[m] for m in after] == [[f"echo: after {n}"] for n in range(3)]


def test_two_apps_in_one_listener_both_deliver_and_each_replies_as_itself(rig: Rig) -> None:
    sim = rig.sim
    first = sim.send_text("oc_app_one", "to the first app")
    second = sim.send_text("oc_app_two", "to the second app", app_id=SECOND_APP)
    answered(sim, "oc_app_one", [first])
    answered(sim, "oc_app_two", [second])
    [one] = sim.sent_messages("oc_app_one")
    [two] = sim.sent_messages("oc_app_two")
    assert (one.text, one.app_id) == ("echo: to the first app", sim.app_id)
    assert (two.text, two.app_id) == ("echo: to the second app", SECOND_APP)
    # the second app's bot is @mentioned by its own open_id: stripped like the first's
    mention = sim.mention_user(SECOND_BOT, "Second Bot")
    third = sim.send_text("oc_app_two", "hello there", app_id=SECOND_APP, chat_type="group",
                          mentions=[mention])
    answered(sim, "oc_app_two", [third])
    assert replies_to(sim, "oc_app_two")[third] == ["echo: hello there"]


def test_a_late_message_is_told_it_arrived_late_and_never_run(rig: Rig) -> None:
    sim, chat = rig.sim, "oc_late_chat"
    two_hours_ago_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    late = sim.send_text(chat, "from long ago", create_time_ms=two_hours_ago_ms)
    fresh = sim.send_text(chat, "from now")
    answered(sim, chat, [late, fresh])
    replies = replies_to(sim, chat)
    assert replies[late] == [LATE_NOTICE]
    assert replies[fresh] == ["echo: from now"]
    sim.redeliver(late)
    marker = sim.send_text(chat, "marker")
    answered(sim, chat, [marker])
    assert replies_to(sim, chat)[late] == [LATE_NOTICE], "told once"


def test_status_shows_each_app_connection(rig: Rig) -> None:
    def status() -> str:
        result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "status"],
                                env={**rig.env, "PATH": "/usr/bin:/bin"}, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return result.stdout

    out = wait_until(lambda: (s := status()).count(": connected since") >= 2 and s, 20,
                     "both connections in status")
    assert f"|{SECOND_APP}: connected" in str(out)
    assert f"|{rig.sim.app_id}: connected" in str(out)
    assert "reconnects" in str(out) and "last event" in str(out)


def test_a_final_refusal_at_start_up_ends_listen_with_one_line(rig: Rig) -> None:
    rig.sim.refuse_endpoint(1000040350)
    try:
        result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "listen"],
                                env={**rig.env, "PATH": "/usr/bin:/bin", "FEISHU_APPS": ""},
                                capture_output=True, text=True, timeout=60)
    finally:
        rig.sim.refuse_endpoint(None)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "feishu-gateway: feishu refused the long connection: code 1000040350: "
        "connection refused by the platform")


def test_a_typing_reaction_shows_while_the_turn_runs_and_a_failure_is_marked(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_typing_chat"
    running = sim.send_text(chat, "sleep 2 thinking")
    wait_until(lambda: sim.reactions(running) == ["Typing"], 10, "the typing reaction")
    wait_until(lambda: running in replies_to(sim, chat), 20, "the reply")
    wait_until(lambda: sim.reactions(running) == [], 10, "the reaction removed")
    failing = sim.send_text(chat, "boom")
    wait_until(lambda: failing in replies_to(sim, chat), 20, "the failure reply")
    wait_until(lambda: sim.reactions(failing) == ["CrossMark"], 10, "the failure mark")


def test_a_group_post_with_a_code_block_and_an_image_reach_the_agent_readably(
        rig: Rig) -> None:
    sim, chat = rig.sim, "oc_types_group"
    mention = sim.mention_bot()
    code = sim.send_text(chat, f"{mention['key']} fix:\n```py\nif x:\n    y()\n```",
                         chat_type="group", mentions=[mention])
    image = sim.send_message("oc_types_dm", message_type="image",
                             content={"image_key": "img_v2_k"})
    answered(sim, chat, [code])
    answered(sim, "oc_types_dm", [image])
    assert replies_to(sim, chat)[code] == ["echo: fix:\n```py\nif x:\n    y()\n```"]
    assert replies_to(sim, "oc_types_dm")[image] == ["echo: [image]"]


def test_status_tells_the_truth_right_after_a_turn(rig: Rig) -> None:
    """Within a second or two of a first message answered, `status` shows its event and the
    worker's agents, not "never" and "none ran a turn yet"."""
    sim, chat = rig.sim, "oc_status_truth"
    replied_to = sim.send_text(chat, "fresh", app_id=SECOND_APP)
    wait_until(lambda: replies_to(sim, chat).get(replied_to), 20, "the answer")
    result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "status"],
                            env={**rig.env, "PATH": "/usr/bin:/bin"}, capture_output=True,
                            text=True, timeout=60)
    line = next(line for line in result.stdout.splitlines() if f"|{SECOND_APP}:" in line)
    assert "last event never" not in line, line
    assert "none ran a turn yet" not in result.stdout, result.stdout
