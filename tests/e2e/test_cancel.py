"""/stop, /new, /reset and `feishu-gateway stop`: real listener, real workers, simulator."""

from __future__ import annotations

import os
import re
import time

import pytest
import redis

from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from tests.support.cli import operator
from tests.support.replies import agent_events, replies_to, reply_of, started
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, Front, Spawn, rig_up


def test_stop_ends_a_cooperative_turn_and_the_follow_up_is_answered(
        front: Front, chat_id: str) -> None:
    feishu, redis_client = front.sim, front.redis
    long_turn = feishu.send_text(chat_id, "sleep 30")
    wait_until(lambda: started(redis_client, chat_id, long_turn), 20, "the long turn")
    stop = feishu.send_text(chat_id, "/stop")
    follow_up = feishu.send_text(chat_id, "follow up")
    clock = time.monotonic()
    assert reply_of(feishu, chat_id, follow_up) == "echo: follow up"
    assert time.monotonic() - clock < TEST_CANCEL_TIMEOUT_S + 2
    assert reply_of(feishu, chat_id, stop).startswith("Stopped.")
    assert long_turn not in replies_to(feishu, chat_id)
    line = re.compile(rf"cancel chat={chat_id} turn=turn:{chat_id}:{long_turn}:\d+ "
                      r"how=cooperative took_s=")
    wait_until(lambda: line.search(front.logs()), 5, "the cancel log line")


def test_a_turn_ignoring_the_flag_is_fenced_at_the_timeout_and_its_reply_discarded(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    stuck = feishu.send_text(chat_id, "hang 5")
    wait_until(lambda: started(redis_client, chat_id, stuck), 20, "the stuck turn")
    clock = time.monotonic()
    stop = feishu.send_text(chat_id, "/stop")
    follow_up = feishu.send_text(chat_id, "after the stuck one")
    later = feishu.send_text(chat_id, "sleep 4 while the stuck one returns")
    assert reply_of(feishu, chat_id, stop).startswith("Stopped.")
    assert reply_of(feishu, chat_id, follow_up) == "echo: after the stuck one"
    assert time.monotonic() - clock < TEST_CANCEL_TIMEOUT_S + 3
    wait_until(lambda: started(redis_client, chat_id, later), 10, "the turn after it")
    # the stuck agent returns (5 s) while `later` holds the lease: it must not disturb it
    assert reply_of(feishu, chat_id, later, timeout_s=20).startswith("echo: sleep 4")
    events = agent_events(redis_client, chat_id)
    assert [e["event"] for e in events if e["message_id"] == stuck] == ["start", "end"]
    assert stuck not in replies_to(feishu, chat_id)
    kinds = [(e["event"], e["message_id"]) for e in events if e["message_id"] == later]
    assert kinds == [("start", later), ("end", later)], "the next turn ran once, undisturbed"


def test_stop_of_a_turn_not_yet_started_means_it_never_runs(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    blockers = [f"{chat_id}_busy{i}" for i in range(2)]
    busy = [feishu.send_text(chat, "hang 3") for chat in blockers]  # both worker slots
    wait_until(lambda: all(started(redis_client, c, m) for c, m in zip(blockers, busy,
                                                                       strict=True)),
               20, "both blockers to occupy the worker slots")
    queued = feishu.send_text(chat_id, "never run me")
    stop = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, stop, timeout_s=2.5) == "Stopped."  # slots still busy
    after = feishu.send_text(chat_id, "after the stop")
    assert reply_of(feishu, chat_id, after) == "echo: after the stop"
    assert not started(redis_client, chat_id, queued)
    assert queued not in replies_to(feishu, chat_id)


def test_stop_with_nothing_running_twice_and_from_another_chat(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    first = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, first) == "Nothing was running."
    long_turn = feishu.send_text(chat_id, "sleep 3")
    wait_until(lambda: started(redis_client, chat_id, long_turn), 20, "the long turn")
    other = f"{chat_id}_other"
    elsewhere = feishu.send_text(other, "/stop")
    assert reply_of(feishu, other, elsewhere) == "Nothing was running."
    assert reply_of(feishu, chat_id, long_turn, timeout_s=10) == "echo: sleep 3"
    second, third = feishu.send_text(chat_id, "/STOP"), feishu.send_text(chat_id, "/stop")
    # a double tap acts once: the desk may take the two in either order (both are honest)
    assert sorted([reply_of(feishu, chat_id, second), reply_of(feishu, chat_id, third)]) == [
        "Already stopped.", "Nothing was running."]


def test_three_messages_queued_behind_a_stuck_turn_are_answered_in_order_after_stop(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    stuck = feishu.send_text(chat_id, "hang 4")
    waiting = [feishu.send_text(chat_id, f"w{n}") for n in range(3)]
    wait_until(lambda: started(redis_client, chat_id, stuck), 20, "the stuck turn")
    stop = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, stop) == (
        "Stopped. 3 waiting message(s) will be answered next.")
    for n, message_id in enumerate(waiting):
        assert reply_of(feishu, chat_id, message_id) == f"echo: w{n}"
    starts = [e["message_id"] for e in agent_events(redis_client, chat_id)
              if e["event"] == "start"]
    assert starts == [stuck, *waiting]


def test_new_resets_the_session_in_every_worker_process(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    def session_of(text: str) -> str:
        return text.split()[1]

    before = [reply_of(feishu, chat_id, feishu.send_text(chat_id, "whoami")) for _ in range(6)]
    assert {session_of(text) for text in before} == {f"{chat_id}#0"}
    reset = feishu.send_text(chat_id, "/new")
    assert reply_of(feishu, chat_id, reset) == "New conversation started."
    after = [reply_of(feishu, chat_id, feishu.send_text(chat_id, "whoami")) for _ in range(6)]
    [new_session] = {session_of(text) for text in after}
    assert new_session != f"{chat_id}#0"
    seen_runners = {text.split(" pid ")[1] for text in before} & {
        text.split(" pid ")[1] for text in after}
    assert seen_runners, "a process that served the old session also served the new one"
    for runner in seen_runners:  # that process's agent for the new session started from zero
        first_after = next(t for t in after if t.endswith(f"pid {runner}"))
        assert f" turn 1 pid {runner}" in first_after
    again = feishu.send_text(chat_id, "/reset")
    assert reply_of(feishu, chat_id, again) == "New conversation started."
    last = reply_of(feishu, chat_id, feishu.send_text(chat_id, "whoami"))
    assert session_of(last) not in (f"{chat_id}#0", new_session) and " turn 1 " in last


def test_operator_stop_from_the_terminal(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str, tmp_path: object) -> None:
    long_turn = feishu.send_text(chat_id, "sleep 30")
    waiting = feishu.send_text(chat_id, "queued behind")
    wait_until(lambda: started(redis_client, chat_id, long_turn), 20, "the long turn")
    status = operator(gateway_env, tmp_path, "chat", chat_id)
    assert re.search(rf"turn: running turn:{chat_id}:{long_turn}:\d+\n", status)
    assert "pending: 2" in status
    assert f"    {waiting} from ou_user_1: 'queued behind'" in status
    line = operator(gateway_env, tmp_path, "stop", chat_id)
    assert line.startswith(f"chat {chat_id}: turn turn:{chat_id}:{long_turn}:")
    assert "cancelled cooperatively" in line and "pending messages re-dispatched: 1" in line
    assert reply_of(feishu, chat_id, waiting) == "echo: queued behind"
    assert long_turn not in replies_to(feishu, chat_id)
    wait_until(lambda: "turn: idle\n  pending: 0\n" in operator(
        gateway_env, tmp_path, "chat", chat_id), 10, "the chat to be idle")


def test_stop_is_deduplicated_like_any_message(
        feishu: Simulator, spawn: Spawn, listener: GatewayProcess, chat_id: str) -> None:
    stop = feishu.send_text(chat_id, "/stop")
    reply_of(feishu, chat_id, stop)
    feishu.redeliver(stop)
    marker = feishu.send_text(chat_id, "marker")
    reply_of(feishu, chat_id, marker)
    assert len(replies_to(feishu, chat_id)[stop]) == 1


def test_opt_in_terminate_kills_the_process_of_a_turn_that_outlived_the_timeout(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str, tmp_path: object, pool: str) -> None:
    if pool != "prefork":
        pytest.skip("terminate signals a pool process: prefork only (docs/design.md)")
    stuck = feishu.send_text(chat_id, "hang 30")
    waiting = feishu.send_text(chat_id, "behind the stuck one")
    wait_until(lambda: started(redis_client, chat_id, stuck), 20, "the stuck turn")
    pid = agent_events(redis_client, chat_id)[0]["pid"]
    line = operator(gateway_env, tmp_path, "stop", chat_id,
                    GATEWAY_CANCEL_TERMINATE="true")
    assert "fenced after the timeout" in line
    assert reply_of(feishu, chat_id, waiting) == "echo: behind the stuck one"

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, 10, f"pool process {pid} to be killed")
    assert [e["event"] for e in agent_events(redis_client, chat_id)
            if e["message_id"] == stuck] == ["start"], "the stuck agent never finished"
    assert stuck not in replies_to(feishu, chat_id)
    # the pool process forked in its place (while the worker applied the revoke) takes
    # turns: two chats run at once again
    chats = [f"{chat_id}_after{n}" for n in range(2)]
    both = {chat: feishu.send_text(chat, "sleep 2") for chat in chats}
    wait_until(lambda: all(started(redis_client, c, m) for c, m in both.items()), 15,
               "both pool slots to run a turn")


def test_fifty_stops_at_once_all_end_within_the_cancel_timeout(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """50 /stop for 50 turns that ignore the flag all complete (fenced, the
    user told) within the cancel timeout + 1 s: no stop waits behind another's wait."""
    with rig_up(tmp_path_factory, start="nothing", kill=True) as rig:
        sim, client = rig.sim, rig.client()
        rig.fleet("worker", pool="threads", concurrency=50)
        rig.fleet("listener")
        sim.wait_connected(1, timeout_s=30)
        chats = [f"oc_many_{n:02d}" for n in range(50)]
        hung = {c: sim.send_text(c, "hang 8") for c in chats}
        wait_until(lambda: all(started(client, c, m) for c, m in hung.items()), 30,
                   "all 50 turns to run")
        sent_at = time.monotonic()
        stops = {c: sim.send_text(c, "/stop") for c in chats}

        def all_told() -> bool:
            return all(replies_to(sim, c).get(m) for c, m in stops.items())

        wait_until(all_told, TEST_CANCEL_TIMEOUT_S + 20, "every stop's reply", interval_s=0.02)
        took = time.monotonic() - sent_at
        assert took <= TEST_CANCEL_TIMEOUT_S + 1, f"the 50 stops took {took:.2f}s"
        assert all(replies_to(sim, c)[m] == ["Stopped."] for c, m in stops.items())
