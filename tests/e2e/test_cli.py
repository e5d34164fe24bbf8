"""`feishu-gateway` as an operator runs it, against a live stack (real Redis, real workers,
a listener on the simulator): status, chats, chat, revoke, retry, purge, and one clear line
with a non-zero exit for every bad input."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

from gateway.core.presence import CONNECTIONS_KEY, publish
from gateway.ops.embedded_redis import EmbeddedRedis, free_port
from gateway.ops.processes import GatewayProcess, wait_until
from gateway.simulator import Simulator
from gateway.simulator.payloads import new_id
from tests.support.cli import cli, ok, one_pool, read
from tests.support.replies import replies_to, reply_of, started


def refused(env: dict[str, str], *argv: str, code: int = 1, stdin: str = "",
            timeout_s: float = 60) -> str:
    """The command failed with exit `code` and exactly one line on stderr: that line."""
    result = cli(env, *argv, stdin=stdin, timeout_s=timeout_s)
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feishu-gateway: "), result.stderr
    return lines[0]


def turn_of(env: dict[str, str], chat_id: str, state: str = "running") -> dict[str, Any]:
    found = wait_until(lambda: (t := read(env, "chat", chat_id)["turn"]) and
                       t["state"] == state and t, 20, f"a {state} turn in {chat_id}")
    assert isinstance(found, dict)
    return found


def busy(feishu: Simulator, client: redis.Redis, chat_id: str,
         behind: list[str]) -> tuple[str, list[str]]:
    """A 30 s turn running in `chat_id` with the texts `behind` waiting: their ids."""
    long_turn = feishu.send_text(chat_id, "sleep 30")
    waiting = [feishu.send_text(chat_id, text) for text in behind]
    wait_until(lambda: started(client, chat_id, long_turn), 20, "the long turn")
    return long_turn, waiting


@one_pool
def test_status_chats_and_chat_show_a_running_turn_and_what_waits(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    long_turn, waiting = busy(feishu, redis_client, chat_id, ["queued 0", "queued 1"])
    view = read(gateway_env, "chat", chat_id)
    turn = view["turn"]
    assert turn["task_id"].startswith(f"turn:{chat_id}:{long_turn}:")
    assert (turn["state"], turn["message_id"], turn["attempt"]) == ("running", long_turn, 1)
    assert turn["worker"] and turn["fence"] and turn["lease_ttl_s"] > 0
    assert view["pending"]["count"] == 3
    assert [m["message_id"] for m in view["pending"]["first"]] == [long_turn, *waiting]
    assert view["pending"]["first"][2]["text"] == "queued 1"
    people = ok(gateway_env, "chat", chat_id)
    assert turn["turn_id"] == turn["task_id"], "the task's first turn"
    assert f"turn: running {turn['turn_id']}\n" in people and "pending: 3" in people
    rows = read(gateway_env, "chats", "--limit", "1000")["chats"]
    mine = next(r for r in rows if r["chat_id"] == chat_id)
    assert (mine["pending"], mine["state"], mine["task_id"]) == (3, "running", turn["task_id"])
    status = read(gateway_env, "status")
    assert status["workers"] and all(w["concurrency"] for w in status["workers"])
    assert status["chats"]["running"] >= 1 and status["chats"]["waiting"] >= 3
    assert set(status["queues"]) == {"gateway.turns", "gateway.release"}
    assert any(c.get("state") == "connected" for c in status["connections"].values())
    assert "workers: " in ok(gateway_env, "status")
    ok(gateway_env, "stop", chat_id)
    for message_id in waiting:
        reply_of(feishu, chat_id, message_id)
    history = wait_until(lambda: len(h := read(gateway_env, "chat", chat_id)["history"]) == 3
                         and h, 20, "three finished turns")
    assert isinstance(history, list)
    assert [(r["message_id"], r["outcome"]) for r in history] == [
        (waiting[1], "replied"), (waiting[0], "replied"), (long_turn, "stopped")]
    assert history[2]["retryable"] and not history[0]["retryable"]


@one_pool
def test_revoke_drops_a_queued_turn_and_stops_a_running_one(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str]) -> None:
    slots = sum(w["concurrency"] for w in read(gateway_env, "status")["workers"])
    busy = [f"oc_busy{n}_{new_id('')}" for n in range(slots)]
    sleepers = {chat: feishu.send_text(chat, "sleep 30") for chat in busy}
    wait_until(lambda: all(started(redis_client, c, m) for c, m in sleepers.items()), 20,
               "every slot busy")
    chat_id = f"oc_queued_{new_id('')}"
    doomed = feishu.send_text(chat_id, "never runs")
    queued = turn_of(gateway_env, chat_id, "queued")
    assert queued["message_id"] == doomed
    line = ok(gateway_env, "revoke", queued["task_id"])
    assert f"turn {queued['task_id']} revoked before it started" in line
    running = turn_of(gateway_env, busy[0])
    line = ok(gateway_env, "revoke", running["task_id"])
    assert "cancelled cooperatively" in line
    for chat in busy[1:]:
        ok(gateway_env, "stop", chat)
    after = feishu.send_text(chat_id, "goes on")
    assert reply_of(feishu, chat_id, after) == "echo: goes on"
    assert doomed not in replies_to(feishu, chat_id)
    assert "is over (stopped)" in refused(gateway_env, "revoke", queued["task_id"])


@one_pool
def test_retry_of_a_failed_turn_is_answered_once_behind_what_waited(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    flaky = feishu.send_text(chat_id, f"flaky {chat_id}")
    assert reply_of(feishu, chat_id, flaky).startswith("Sorry, something went wrong")
    history = wait_until(lambda: read(gateway_env, "chat", chat_id)["history"], 10, "history")
    assert isinstance(history, list) and history[0]["outcome"] == "failed"
    task_id = history[0]["task_id"]
    slow = feishu.send_text(chat_id, "sleep 30")
    after = feishu.send_text(chat_id, "waiting before the retry")
    wait_until(lambda: started(redis_client, chat_id, slow), 20, "the slow turn")
    assert "will run again" in ok(gateway_env, "retry", task_id)
    assert "already waits or runs" in refused(gateway_env, "retry", chat_id, flaky)
    assert [m["message_id"] for m in read(gateway_env, "chat", chat_id)["pending"]["first"]
            ] == [slow, after, flaky]
    ok(gateway_env, "stop", chat_id)
    wait_until(lambda: len(replies_to(feishu, chat_id).get(flaky, [])) == 2, 30,
               "the retry's answer")
    texts = [m.text for m in feishu.sent_messages(chat_id)]
    assert texts.index("echo: waiting before the retry") < texts.index(f"echo: flaky {chat_id}")
    assert replies_to(feishu, chat_id)[flaky] == [texts[0], f"echo: flaky {chat_id}"]
    assert replies_to(feishu, chat_id)[after] == ["echo: waiting before the retry"]
    line = refused(gateway_env, "retry", chat_id, flaky)
    assert "was answered (replied)" in line
    line = refused(gateway_env, "retry", chat_id, "om_never_seen")
    assert "no finished turn on record" in line and "GATEWAY_RETRY_RETENTION_S" in line


@one_pool
def test_purge_asks_first_keeps_the_running_turn_and_tells_the_chat_only_when_asked(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    long_turn, waiting = busy(feishu, redis_client, chat_id, [f"to drop {n}" for n in range(3)])
    wait_until(lambda: read(gateway_env, "chat", chat_id)["pending"]["count"] == 4, 10,
               "all four admitted")
    assert "aborted" in refused(gateway_env, "purge", chat_id, stdin="n\n")
    assert read(gateway_env, "chat", chat_id)["pending"]["count"] == 4
    out = ok(gateway_env, "purge", chat_id, "--notify", stdin="y\n")
    assert f"chat {chat_id}: 3 waiting message(s) dropped" in out
    view = read(gateway_env, "chat", chat_id)
    assert view["pending"]["count"] == 1 and view["turn"]["message_id"] == long_turn
    told = reply_of(feishu, chat_id, waiting[-1])
    assert told.startswith("An operator cleared 3 waiting message(s)")
    last = feishu.send_text(chat_id, "after the purge")
    out = ok(gateway_env, "purge", chat_id, "--yes", "--stop")
    assert "1 waiting message(s) dropped" in out and "cancelled cooperatively" in out
    wait_until(lambda: read(gateway_env, "chat", chat_id)["turn"] is None, 10, "idle")
    assert set(replies_to(feishu, chat_id)) == {waiting[-1]}, "nothing else was answered"
    assert last not in replies_to(feishu, chat_id)


def test_every_bad_input_gets_one_clear_line_and_a_non_zero_exit(
        gateway_env: dict[str, str], redis_client: redis.Redis) -> None:
    env = gateway_env
    assert "chat oc_nobody is unknown" in refused(env, "chat", "oc_nobody")
    assert "chat oc_nobody is unknown" in refused(env, "stop", "oc_nobody")
    assert "chat oc_nobody is unknown" in refused(env, "purge", "oc_nobody", "--yes")
    assert "not a turn's task id" in refused(env, "revoke", "3f2a-not-a-turn")
    assert "chat oc_nobody is unknown" in refused(env, "revoke", "turn:oc_nobody:om_1:17")
    assert "chat oc_nobody is unknown" in refused(env, "retry", "oc_nobody", "om_1")
    dead = {**env, "REDIS_URL": "redis://:hunter2@127.0.0.1:1/0",
            "GATEWAY_REDIS_TIMEOUT_S": "0.5"}
    for argv in (["status"], ["chats"], ["chat", "oc_x"], ["stop", "oc_x"], ["sweep"],
                 ["purge", "oc_x", "--yes"]):
        line = refused(dead, *argv, code=2)
        assert "cannot reach Redis at redis://:***@127.0.0.1:1/0" in line, line
        assert "hunter2" not in line
    assert "Usage:" in cli(env, "revoke").stderr and cli(env, "revoke").returncode == 2
    not_utf8 = "oc_\udcff"  # (the byte 0xff in argv, as a shell passes it)
    for argv in (["chat", not_utf8], ["stop", not_utf8], ["purge", not_utf8, "--yes"],
                 ["retry", not_utf8, "om_1"], ["revoke", f"turn:{not_utf8}:om_1:17"],
                 ["chat", "oc_x", "--app", "cli_\udcff"]):
        line = refused(env, *argv, code=2)
        assert "is not UTF-8" in line and "\\xff" in line, line
    with EmbeddedRedis() as lonely:  # a broker no worker consumes
        alone = {**env, "REDIS_URL": lonely.url}
        result = cli(alone, "status")
        assert result.returncode == 1 and "workers: none answered" in result.stdout
        assert result.stderr.startswith("feishu-gateway: no Celery worker answered")


def test_reads_answer_without_importing_celery_or_the_feishu_sdk(
        gateway_env: dict[str, str]) -> None:
    probe = ("import sys; from gateway.ops.cli import main; code = main(['chats', '--json']); "
             "heavy = sorted(m for m in ('celery', 'kombu', 'lark_oapi') if m in sys.modules); "
             "print(code, heavy, file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**gateway_env, "PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.stderr.strip().splitlines()[-1] == "0 []", result.stderr
    assert ok(gateway_env, "--version").startswith("feishu-gateway, version ")


@one_pool
def test_health_checks_this_hosts_listener_and_worker(
        listener: GatewayProcess, gateway_env: dict[str, str]) -> None:
    assert "connection(s) up" in ok(gateway_env, "health", "listener")
    assert "worker(s) on " in ok(gateway_env, "health", "worker")
    elsewhere = {**gateway_env, "REDIS_URL": "redis://127.0.0.1:1/0",
                 "GATEWAY_REDIS_TIMEOUT_S": "0.5"}
    # Docker reserves a healthcheck's exit 2: every unhealthy case is 1
    assert "cannot reach Redis" in refused(elsewhere, "health", "listener", code=1)
    assert "cannot reach the Celery broker" in refused(elsewhere, "health", "worker", code=1)
    assert cli(gateway_env, "health", "nobody").returncode == 1


def test_health_judges_the_listener_running_now_not_one_stopped_before_it(
        private_redis: EmbeddedRedis, gateway_env: dict[str, str]) -> None:
    """A listener restarted on the same host (a container restarted, a unit reloaded): its
    predecessor's last record says "stopped" for a while yet."""
    env = {**gateway_env, "REDIS_URL": private_redis.url}
    client = redis.Redis.from_url(private_redis.url)
    host, app = socket.gethostname(), gateway_env["FEISHU_APP_ID"]
    client.delete(CONNECTIONS_KEY)
    publish(client, CONNECTIONS_KEY, f"{host}:1001|{app}", {"state": "stopped"})
    assert "no connection reported" in refused(env, "health", "listener", code=1)
    publish(client, CONNECTIONS_KEY, f"{host}:1002|{app}",
            {"state": "connected", "identity_known": True})
    assert "1 connection(s) up" in ok(env, "health", "listener")
    publish(client, CONNECTIONS_KEY, f"{host}:1003|{app}", {"state": "reconnecting"})
    assert f"not connected: {app}" in refused(env, "health", "listener", code=1)


@one_pool
def test_turns_a_task_ran_after_its_first_are_revoked_and_retried_by_their_ids(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    flaky = feishu.send_text(chat_id, f"flaky {chat_id}")
    slow = feishu.send_text(chat_id, "sleep 5")
    wait_until(lambda: started(redis_client, chat_id, slow), 20, "the second turn")
    turn = read(gateway_env, "chat", chat_id)["turn"]
    assert turn["message_id"] == slow and turn["task_id"].split(":")[2] == flaky
    assert turn["task_id"] != turn["turn_id"], "it runs in the task of the turn before it"
    line = ok(gateway_env, "revoke", turn["task_id"])
    assert f"turn {turn['turn_id']} cancelled cooperatively" in line, "the turn revoked"
    history = wait_until(lambda: len(h := read(gateway_env, "chat", chat_id)["history"]) == 2
                         and h, 10, "two finished turns")
    assert isinstance(history, list)
    assert [(r["message_id"], r["outcome"]) for r in history] == [(slow, "stopped"),
                                                                  (flaky, "failed")]
    for record in history:
        assert "will run again" in ok(gateway_env, "retry", record["turn_id"])
    wait_until(lambda: replies_to(feishu, chat_id).get(slow) == ["echo: sleep 5"], 30,
               "the stopped turn's answer, once")
    wait_until(lambda: replies_to(feishu, chat_id)[flaky][-1] == f"echo: flaky {chat_id}", 30,
               "the failed turn's answer, retried after the stopped one")
    assert replies_to(feishu, chat_id).get(slow) == ["echo: sleep 5"]


def busy_port() -> socket.socket:
    """A socket listening on a free port of 127.0.0.1 (close it when done)."""
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    return taken


def test_listen_with_its_metrics_port_taken_stops_at_once_in_one_line(
        gateway_env: dict[str, str]) -> None:
    with busy_port() as taken:
        port = taken.getsockname()[1]
        env = {**gateway_env, "GATEWAY_METRICS_PORT": str(port),
               "GATEWAY_METRICS_ADDR": "127.0.0.1"}
        line = refused(env, "listen", code=2, timeout_s=20)
    assert f"127.0.0.1:{port}" in line and "GATEWAY_METRICS_PORT" in line, line
    assert "in use" in line.lower(), line


def test_listen_with_an_unusable_multiprocess_folder_stops_at_once_in_one_line(
        gateway_env: dict[str, str], tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR set, prometheus_client writes every figure to a file
    there: a folder that is missing (or a file) would fail each event the listener counts."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for folder in (tmp_path / "missing", a_file):
        env = {**gateway_env, "GATEWAY_METRICS_PORT": str(free_port()),
               "PROMETHEUS_MULTIPROC_DIR": str(folder)}
        line = refused(env, "listen", code=2, timeout_s=20)
        assert f"PROMETHEUS_MULTIPROC_DIR={folder}" in line, line


def test_a_system_error_at_start_up_is_one_line_and_exit_2(
        gateway_env: dict[str, str]) -> None:
    with busy_port() as taken:
        port = taken.getsockname()[1]
        line = refused(gateway_env, "simulator", "--port", str(port), code=2)
    assert f"127.0.0.1:{port}" in line and "in use" in line.lower(), line


BOOM = ("import sys; from gateway.ops.cli import main; from gateway.ops.cli.app import cli\n"
        "@cli.command()\n"
        "def boom() -> None:\n"
        "    raise {error}\n"
        "sys.exit(main(sys.argv[1:]))")


def boom(env: dict[str, str], error: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`feishu-gateway [argv] boom` with a command of the test's that raises `error`: what
    the one error boundary makes of an exception no command expects."""
    return subprocess.run([sys.executable, "-c", BOOM.format(error=error), *argv, "boom"],
                          capture_output=True, text=True, timeout=60,
                          env={**env, "PATH": "/usr/bin:/bin"})


def test_an_unexpected_error_is_one_line_and_exit_70_its_traceback_only_with_debug(
        gateway_env: dict[str, str]) -> None:
    result = boom(gateway_env, "KeyError('lost')")
    assert result.returncode == 70, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feishu-gateway: "), result.stderr
    assert "KeyError: 'lost'" in lines[0] and "--debug" in lines[0], lines[0]
    debug = boom(gateway_env, "KeyError('lost')", "--debug")
    assert debug.returncode == 70 and "Traceback" in debug.stderr, debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == lines[0]
    denied = boom(gateway_env, "PermissionError(13, 'Permission denied', '/srv/x')")
    assert denied.returncode == 2, denied.stderr
    assert denied.stderr.strip().splitlines() == [
        "feishu-gateway: PermissionError: [Errno 13] Permission denied: '/srv/x'"]


@one_pool
def test_a_users_stop_right_after_an_operators_is_not_debounced(
        feishu: Simulator, listener: GatewayProcess, redis_client: redis.Redis,
        gateway_env: dict[str, str], chat_id: str) -> None:
    """`feishu-gateway stop` is never debounced, and it does not debounce the chat's users
    either: their /stop a moment later is answered for what it finds."""
    long_turn, _ = busy(feishu, redis_client, chat_id, [])
    assert "cancelled cooperatively" in ok(gateway_env, "stop", chat_id)
    stop = feishu.send_text(chat_id, "/stop")
    assert reply_of(feishu, chat_id, stop) == "Nothing was running."
