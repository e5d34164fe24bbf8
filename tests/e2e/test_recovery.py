"""The core's promises under faults, each with
real workers, listeners, Redis and the simulator."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import time
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from gateway.broker.names import RUN_TURN, TURNS_QUEUE
from gateway.chats.cancel import Canceller
from gateway.chats.keys import ChatKeys, turn_task_id
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.model import Message
from gateway.feishu.outbound.delivery import reply_uuid
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.worker.sending import gave_up_reply
from tests.support.replies import agent_events, replies_to, reply_of, started
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, TEST_LEASE_TTL_S, Rig, Spawn, rig_up

SWEEP_S = 0.5


def starts(client: redis.Redis, chat_id: str) -> list[str]:
    return [e["message_id"] for e in agent_events(client, chat_id) if e["event"] == "start"]


@pytest.mark.parametrize("worker_pool", ["prefork", "threads"])
def test_turns_reserved_by_a_worker_that_is_killed_are_answered_after_the_lease_ttl(
        tmp_path_factory: pytest.TempPathFactory, worker_pool: str) -> None:
    """Turns a worker had prefetched (reserved, not started) when it was SIGKILLed
    are published again within the lease TTL plus a sweep, never after the broker's
    visibility timeout (1 h) or the queued TTL (15 min), and run once."""
    with rig_up(tmp_path_factory, start="nothing", pool=worker_pool) as rig:
        sim, client = rig.sim, rig.client()
        greedy = rig.fleet("worker", concurrency=1, extra=("--prefetch-multiplier", "4"))
        rig.fleet("listener")
        sim.wait_connected(1, timeout_s=30)
        busy = sim.send_text("oc_busy", "hang 8")
        wait_until(lambda: started(client, "oc_busy", busy), 20, "the slot to be taken")
        waiting = {f"oc_reserved_{n}": sim.send_text(f"oc_reserved_{n}", f"reserved {n}")
                   for n in range(3)}
        wait_until(lambda: client.llen("gateway.turns") == 0 and all(
            client.hget(ChatKeys(c).lease, "state") == "queued" for c in waiting), 10,
            "the worker to reserve every turn (nothing left in the broker, none started)")
        greedy.kill()
        killed_at = time.monotonic()
        rig.fleet("worker", concurrency=2)
        def all_answered() -> bool:
            return all(m in replies_to(sim, c) for c, m in waiting.items())

        wait_until(all_answered, TEST_LEASE_TTL_S + SWEEP_S + 20, "every reserved turn")
        assert time.monotonic() - killed_at < TEST_LEASE_TTL_S * 2 + SWEEP_S + 15
        for chat, message_id in waiting.items():
            assert replies_to(sim, chat)[message_id] == [f"echo: reserved {chat[-1]}"]
            assert starts(client, chat) == [message_id], "run exactly once"


def test_a_turn_redispatched_beside_its_stale_self_is_not_taken_for_stopped(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    """The turn lost its lease while it still runs (a long pause) and the chat was
    dispatched again, with the threads pool into the same process. The stale turn's
    heartbeat notices only now: it must stop the stale turn, not the new one."""
    message_id = feishu.send_text(chat_id, "sleep 3 and answer")
    wait_until(lambda: started(redis_client, chat_id, message_id), 20, "the first run")
    lease = ChatKeys(chat_id).lease
    fresh = int(redis_client.hget(lease, "fence") or 0) + 1
    redis_client.hset(lease, mapping={"fence": fresh, "state": "queued"})  # taken over
    publisher = Celery(broker=gateway_env["REDIS_URL"])
    publisher.send_task(RUN_TURN, task_id=turn_task_id(chat_id, message_id, fresh),
                        queue=TURNS_QUEUE, kwargs={"chat_id": chat_id,
                                                   "message_id": message_id, "fence": fresh})
    publisher.close()
    assert reply_of(feishu, chat_id, message_id, timeout_s=20) == "echo: sleep 3 and answer"
    wait_until(lambda: [e["event"] for e in agent_events(redis_client, chat_id)].count("end")
               == 2, 10, "both runs to end")
    assert len(starts(redis_client, chat_id)) == 2
    assert len(replies_to(feishu, chat_id)[message_id]) == 1


def test_a_double_tapped_stop_acts_once(feishu: Simulator, listener: GatewayProcess,
                                        redis_client: redis.Redis, chat_id: str) -> None:
    """A second /stop a moment after the first (an impatient user) must not stop the
    message the first one promised to answer; it says how to stop that one."""
    long_turn = feishu.send_text(chat_id, "sleep 30")
    promised = feishu.send_text(chat_id, "sleep 2 then answer me")
    wait_until(lambda: started(redis_client, chat_id, long_turn), 20, "the long turn")
    first = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, first) == (
        "Stopped. 1 waiting message(s) will be answered next.")
    second = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, second).startswith(
        "The previous turn was just stopped; send /stop again in ")
    assert reply_of(feishu, chat_id, promised) == "echo: sleep 2 then answer me"


def test_a_rerun_after_a_partial_reply_resends_the_same_answer(
        feishu: Simulator, listener: GatewayProcess, spawn: Spawn, redis_client: redis.Redis,
        chat_id: str) -> None:
    """The first piece was sent, the worker died before the second; the re-run
    resends the stored pieces (the first is not shown twice), never a second answer."""
    message_id = feishu.send_text(chat_id, "long 6000")
    second_piece = reply_uuid(message_id, "reply", 1)
    feishu.fail_uuid(second_piece, "5xx-json")
    try:
        wait_until(lambda: feishu.send_attempts(second_piece) >= 2, 20,
                   "the second piece to be failing")
        pid = agent_events(redis_client, chat_id)[0]["pid"]
        os.kill(pid, signal.SIGKILL)  # prefork: its pool process; threads: the worker
    finally:
        feishu.fail_uuid(second_piece, None)
    pieces = wait_until(lambda: (r := replies_to(feishu, chat_id).get(message_id, [])) and
                        len(r) == 2 and r, TEST_LEASE_TTL_S + 25, "both pieces")
    assert isinstance(pieces, list)
    nonces = set(re.findall(r"answer-[0-9a-f]{8}", "".join(pieces)))
    assert len(nonces) == 1, f"two answers stitched together: {nonces}"
    whole = (f"{nonces.pop()} " * 400)[:6000]
    unlabelled = [re.sub(r"\n\n\(\d/2\)$", "", piece) for piece in pieces]
    assert "".join(unlabelled).replace(" ", "") == whole.replace(" ", ""), \
        "one answer, complete"
    assert len(starts(redis_client, chat_id)) == 1, "the agent was not asked again"
    uuids = {m.uuid for m in feishu.sent_messages(chat_id)}
    assert uuids == {reply_uuid(message_id), second_piece}


def test_failure_and_give_up_notices_have_uuids_of_their_own() -> None:
    """A failure reply must not take the uuid a real answer would use."""
    kinds = {reply_uuid("om_x", kind) for kind in ("reply", "failure", "gave-up", "command",
                                                   "inbox-full")}
    assert len(kinds) == 5


def test_two_bots_answering_one_message_never_share_a_uuid() -> None:
    """A message that mentions two of our bots reaches each app tagged with it: each bot's
    answer has uuids of its own (Feishu may send one message per uuid, whoever sends it);
    one app's untagged messages keep the uuids they always had."""
    alone = Message("om_x", "oc_g", "group", "ou_u", "text", "hi")
    first, second = (dataclasses.replace(alone, app_id=app) for app in ("cli_a", "cli_b"))
    assert len({reply_uuid(m.reply_key) for m in (alone, first, second)}) == 3
    assert alone.reply_key == "om_x"


def test_a_late_message_takes_its_place_by_create_time(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        chat_id: str) -> None:
    """A message refused during a blip and redelivered later is answered before the
    ones sent after it, but never before the turn that already started."""
    running = feishu.send_text(chat_id, "sleep 2")
    wait_until(lambda: started(redis_client, chat_id, running), 20, "the running turn")
    early = feishu.send_text(chat_id, "sent first", deliver=False)
    time.sleep(0.01)  # a later create_time (ms), not synchronisation
    late = feishu.send_text(chat_id, "sent second")
    feishu.deliver_held(early)  # Feishu redelivers it only now
    reply_of(feishu, chat_id, late)
    assert starts(redis_client, chat_id) == [running, early, late]


def test_stored_entries_of_another_version_are_read_and_garbage_is_dropped(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        spawn: Spawn, chat_id: str) -> None:
    """An inbox entry written by a newer version (one more field) is answered; one
    that is not a message at all is dropped with one line; the chat goes on."""
    running = feishu.send_text(chat_id, "sleep 1")
    wait_until(lambda: started(redis_client, chat_id, running), 20, "the running turn")
    newer_id = feishu.send_text(chat_id, "from the future", deliver=False)
    newer = json.dumps({"message_id": newer_id, "chat_id": chat_id, "text": "from the future",
                        "sender_open_id": "ou_user_1", "added_in_v2": {"x": 1}})
    inbox = ChatKeys(chat_id).inbox
    now_ms = int(time.time() * 1000)
    redis_client.zadd(inbox, {f"{now_ms * 1000:016d}|{newer_id}|{newer}": now_ms})
    redis_client.zadd(inbox, {f"{now_ms * 1000 + 1:016d}|om_garbage|{{not json": now_ms + 1})
    after = feishu.send_text(chat_id, "after them")
    assert reply_of(feishu, chat_id, newer_id) == "echo: from the future"
    assert reply_of(feishu, chat_id, after) == "echo: after them"
    log = spawn.logs("worker")
    assert f"message om_garbage of chat {chat_id} dropped: its stored entry cannot be read" in log


def test_a_canceller_that_dies_after_its_step_still_stops_the_turn(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        redis_server: object, gateway_env: dict[str, str], chat_id: str) -> None:
    """The turn was still waiting for a worker; the canceller revokes it and dies
    before it publishes the next one. The stopped message never runs, and the chat goes on
    after the claim TTL."""
    blockers = [f"{chat_id}_busy{i}" for i in range(2)]
    busy = [feishu.send_text(chat, "hang 4") for chat in blockers]
    wait_until(lambda: all(started(redis_client, c, m) for c, m in zip(blockers, busy,
                                                                       strict=True)),
               20, "both blockers to occupy the worker slots")
    stopped = feishu.send_text(chat_id, "never run me")
    after = feishu.send_text(chat_id, "after the stop")
    wait_until(lambda: redis_client.hget(ChatKeys(chat_id).lease, "state") == "queued" and
               redis_client.zcard(ChatKeys(chat_id).inbox) == 2, 10, "both to be admitted")

    class Died(Exception):
        pass

    def die(*_: object) -> None:
        raise Died

    client = redis.Redis.from_url(gateway_env["REDIS_URL"])
    store = ChatStore(client, StoreConfig(claim_ttl_ms=3000, running_ttl_ms=3000))
    app = Celery(broker=gateway_env["REDIS_URL"])

    def revoke(task_id: str, terminate: bool) -> None:
        app.control.revoke(task_id, terminate=terminate)

    canceller = Canceller(store, die, revoke,
                          timeout_s=TEST_CANCEL_TIMEOUT_S, lease_ttl_ms=3000, debounce_s=0)
    with pytest.raises(Died):  # revoked, then cut off before the next turn was published
        canceller.cancel(chat_id, "operator-1")
    client.close()
    app.close()
    assert reply_of(feishu, chat_id, after, timeout_s=20) == "echo: after the stop"
    assert stopped not in starts(redis_client, chat_id)
    assert stopped not in replies_to(feishu, chat_id)


@pytest.fixture
def own_rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="nothing") as rig:
        yield rig


def test_a_listener_killed_in_the_middle_of_a_stop_leaves_it_to_another(
        own_rig: Rig, chat_id: str) -> None:
    """The listener dies while its control desk waits for a stuck turn to end. The /stop
    was marked seen, so Feishu will not send it again: the next listener must finish it:
    the user hears "Stopped.", the stuck message is never answered and the one behind it
    is."""
    rig, sim = own_rig, own_rig.sim
    client = rig.client()
    rig.fleet("worker", supervise=True)
    first = rig.fleet("listener")
    sim.wait_connected(1, timeout_s=30)
    stuck = sim.send_text(chat_id, "hang 20")
    wait_until(lambda: started(client, chat_id, stuck), 20, "the stuck turn")
    stop = sim.send_text(chat_id, "/stop")
    behind = sim.send_text(chat_id, "behind the stuck one")
    wait_until(lambda: f"command /stop in chat {chat_id}" in first.log(), 10,
               "the listener to take the /stop")
    first.kill()  # its desk is waiting out the cancel timeout now
    rig.fleet("listener")
    sim.wait_connected(1, timeout_s=30)
    assert reply_of(sim, chat_id, stop, timeout_s=40).startswith("Stopped.")
    assert reply_of(sim, chat_id, behind, timeout_s=20) == "echo: behind the stuck one"
    assert stuck not in replies_to(sim, chat_id)
    assert len(replies_to(sim, chat_id)[stop]) == 1


def test_a_hung_agent_in_the_threads_pool_does_not_hold_its_chat_forever(
        tmp_path_factory: pytest.TempPathFactory, chat_id: str) -> None:
    """Celery applies no time limit to the threads pool; the heartbeat stops
    extending the lease after GATEWAY_TURN_TIME_LIMIT_S, so the chat goes on."""
    with rig_up(tmp_path_factory, start="nothing", kill=True,  # its thread still hangs
                pool="threads", GATEWAY_TURN_TIME_LIMIT_S="2", GATEWAY_MAX_ATTEMPTS="1") as rig:
        sim = rig.sim
        rig.fleet("worker", concurrency=2)
        rig.fleet("listener")
        sim.wait_connected(1, timeout_s=30)
        hung = sim.send_text(chat_id, "hang 25")
        behind = sim.send_text(chat_id, "behind the hung one")
        slow = sim.send_text(f"{chat_id}_slow", "sleep 10")  # sees the stop, returns
        clock = time.monotonic()
        assert reply_of(sim, chat_id, behind, timeout_s=20) == "echo: behind the hung one"
        assert time.monotonic() - clock < 2 + TEST_LEASE_TTL_S + SWEEP_S + 8
        assert reply_of(sim, chat_id, hung) == gave_up_reply(1)
        assert "ran past GATEWAY_TURN_TIME_LIMIT_S" in rig.fleet.logs("worker")
        # a turn that honours the stop is not dropped silently either: the attempt counts
        assert reply_of(sim, f"{chat_id}_slow", slow, timeout_s=20) == gave_up_reply(1)
