"""The terminal demo as a user meets it: typed lines in, the bot's side printed as it comes
(commands at once, streamed answers growing, approval cards answered with /approve, /stop
while an answer streams), start-up failures told in one line, its log folder cleaned up."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.ops.demo import QUITTING, gather, run_demo
from gateway.ops.embedded_redis import free_port

SETTINGS_PREFIXES = ("REDIS_", "FEISHU_", "GATEWAY_", "CELERY_")
START_TIMEOUT_S = 90.0


def demo_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIXES)}
    return {**env, "NO_PROXY": "127.0.0.1,localhost", **extra}


@pytest.mark.parametrize(("typed", "messages"), [
    (["hello\n", "\n", "world\n"], ["hello", "world"]),
    (["first \\\n", "  second\n"], ["first \n  second"]),
    (["```python\n", "def f():\n", "\n", "    return 1\n", "```\n", "after\n"],
     ["```python\ndef f():\n\n    return 1\n```", "after"]),
    (["look: \\\n", "```\n", "x  = 1\n", "```\n"], ["look: \n```\nx  = 1\n```"]),
    (["```inline```\n", "next\n"], ["```inline```", "next"]),
    (["```\n", "never closed\n"], ["```\nnever closed"]),
    (["   \n", "\n"], []),
])
def test_terminal_lines_become_messages_with_their_layout(typed: list[str],
                                                          messages: list[str]) -> None:
    assert list(gather(typed)) == messages


class Demo:
    """`run_demo` on a thread: lines typed into a pipe, its screen read as it grows."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.lines = os.fdopen(read_fd, "r")
        self.keyboard = os.fdopen(write_fd, "w")
        self.screen = io.StringIO()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="demo-under-test")

    def _run(self) -> None:
        try:
            run_demo("oc_demo_test", self.lines, self.screen, sim_port=0)
        except BaseException as error:  # noqa: BLE001  (reported by the test)
            self.error = error

    def type(self, line: str) -> tuple[int, float]:
        """Type a line; returns where the screen stood and when."""
        mark = (len(self.screen.getvalue()), time.monotonic())
        self.keyboard.write(line + "\n")
        self.keyboard.flush()
        return mark

    def wait_for(self, pattern: str, after: int = 0, timeout_s: float = 15) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = re.search(pattern, self.screen.getvalue()[after:], re.DOTALL)
            if found is not None:
                return found
            if self.error is not None or not self.thread.is_alive() \
                    or time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} on the demo's screen ({self.error!r}):"
                                     f"\n{self.screen.getvalue()[after:][-3000:]}")
            time.sleep(0.01)


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    with pytest.MonkeyPatch.context() as patch:
        for name in os.environ:
            if name.startswith(SETTINGS_PREFIXES):
                patch.delenv(name)
        patch.setenv("NO_PROXY", "127.0.0.1,localhost")
        running = Demo()
        running.thread.start()
        try:
            running.wait_for(r"chat oc_demo_test: ", timeout_s=START_TIMEOUT_S)
            yield running
        finally:
            running.keyboard.close()
            running.thread.join(90)
            running.lines.close()
    assert running.error is None, running.error
    assert "not done after" not in running.screen.getvalue()


def test_the_demo_runs_the_showcase_agent_and_names_runnable_commands(demo: Demo) -> None:
    screen = demo.screen.getvalue()
    assert "running agent 'showcase'" in screen
    for name in ("feishu-gateway", "celery"):
        shown = re.search(rf"\n  (?:\S+=\S+ )?(\S*{name}|\S+ -m \S+) ", screen)
        assert shown is not None, screen
        command = shown.group(1).split()[0]
        assert shutil.which(command) is not None, f"{command} cannot be run from {os.getcwd()}"


def test_the_printed_exports_run_every_operators_command_from_a_second_shell(
        demo: Demo) -> None:
    """`purge --notify` calls Feishu: the export line names the simulator too. (In a chat of
    its own, sent through the web chat's API: the terminal's chat is the other tests'.)"""
    screen = demo.screen.getvalue()
    exports = re.search(r"export (REDIS_URL=\S+(?: \S+=\S+)*)\n", screen)
    web = re.search(r"web chat: open (http://\S+)/ ", screen)
    assert exports is not None and web is not None, screen
    shell = {**demo_env(), **dict(pair.split("=", 1) for pair in exports.group(1).split())}
    chat = "oc_demo_second_shell"

    def say(text: str) -> None:
        sent = httpx.post(f"{web.group(1)}/sim/v1/messages", json={"chat_id": chat,
                                                                  "text": text}, timeout=10)
        assert sent.status_code == 200, sent.text

    def operator(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gateway.ops.cli", *argv],
                              capture_output=True, text=True, env=shell, timeout=60)

    for text in ("slow", "first waiting", "second waiting"):
        say(text)
    deadline = time.monotonic() + 20
    while '"count": 3' not in operator("chat", chat, "--json").stdout:  # (its turn's too)
        assert time.monotonic() < deadline, "two messages waiting behind the slow one"
        time.sleep(0.2)
    purged = operator("purge", chat, "--yes", "--notify")
    assert purged.returncode == 0, purged.stderr
    assert "2 waiting message(s) dropped" in purged.stdout and "told" in purged.stdout
    say("/stop")


def test_stop_and_new_with_nothing_running_answer_at_once(demo: Demo) -> None:
    for command, answer in (("/stop", "Nothing was running."),
                            ("/new", "New conversation started.")):
        at, began = demo.type(command)
        demo.wait_for(rf"bot: {re.escape(answer)}\n", after=at, timeout_s=10)
        assert time.monotonic() - began < 3, f"{command} took {time.monotonic() - began:.1f}s"


def test_a_streamed_answer_is_seen_growing(demo: Demo) -> None:
    said = " ".join(f"word{i}" for i in range(20))
    at, _ = demo.type(said)
    seen: list[str] = []
    deadline = time.monotonic() + 20
    while "(done)" not in (seen or [""])[-1] and time.monotonic() < deadline:
        shown = demo.screen.getvalue()[at:]
        if "bot: " in shown and (not seen or seen[-1] != shown):
            seen.append(shown)
        time.sleep(0.01)
    assert seen and re.search(rf"You said: {said}\n\s+\(done\)\n", seen[-1]), seen[-1:]
    partial = [s for s in seen if "word19" not in s]
    assert len(partial) >= 3, f"only {len(partial)} partial view(s) of the answer: {seen}"


def test_stop_while_a_slow_answer_streams_stops_it_at_once(demo: Demo) -> None:
    at, _ = demo.type("slow")
    demo.wait_for(r"stops me\): 1 2", after=at, timeout_s=20)
    at, began = demo.type("/stop")
    shown = demo.wait_for(r"\n\s+⏹ Stopped\.\n", after=at, timeout_s=10)
    took_s = time.monotonic() - began
    confirmed = demo.wait_for(r"\(bot reacted: ✓ done\)", after=at, timeout_s=10)
    assert took_s < 1.0, f"/stop shown after {took_s:.2f}s"
    seen = demo.screen.getvalue()[at:max(shown.end(), confirmed.end())]
    assert "nobody stopped me" not in seen
    assert "bot: Stopped." not in seen, "said once: on the answer, the /stop gets a reaction"


def test_an_approval_card_is_answered_with_approve_at_the_terminal(demo: Demo) -> None:
    at, _ = demo.type("delete build/")
    demo.wait_for(r"bot asks: Delete build/\? \(a pretend action: nothing is deleted\)\n"
                  r"\s+answer /approve or /deny here", after=at, timeout_s=20)
    at, _ = demo.type("/approve")
    demo.wait_for(r"I pretended to delete `build/`\.\n\s+\(done\)\n", after=at, timeout_s=15)
    demo.wait_for(r"bot: Approval allowed once\n", after=at, timeout_s=5)


def test_a_stale_redis_url_fails_at_once_in_one_line(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    began = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "demo", "--port", "0"],
                            input="", capture_output=True, text=True, timeout=60,
                            cwd=str(tmp_path), env=demo_env(REDIS_URL=url))
    assert time.monotonic() - began < 10
    assert result.returncode == 2
    assert result.stderr.startswith(f"feishu-gateway: cannot reach Redis at {url} (REDIS_URL)")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "embedded redis" not in result.stdout


def test_a_process_failing_to_start_shows_its_log_and_keeps_the_logs(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "demo", "--port", "0"],
                            input="", capture_output=True, text=True, timeout=100,
                            cwd=str(tmp_path),
                            env=demo_env(GATEWAY_AGENT="no_such_module_here:factory"))
    assert result.returncode == 2, result.stderr
    assert re.search(r"--- the last lines of \S+worker\.log ---\n.*cannot import "
                     r"'no_such_module_here'", result.stdout, re.DOTALL), result.stdout
    kept = re.search(r"the worker exited with code \d+ while starting; .* kept in (\S+)\n",
                     result.stderr)
    assert kept is not None and len(result.stderr.splitlines()) == 1, result.stderr
    assert (Path(kept.group(1)) / "worker.log").exists()
    shutil.rmtree(kept.group(1))


def test_the_demo_answers_a_code_block_and_a_long_line_in_full_and_cleans_up(
        tmp_path: Path) -> None:
    long_line = "x" * 5000
    typed = f"```python\ndef f():\n    return 1\n```\n{long_line}\n"
    result = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "demo", "--port", "0"],
                            input=typed, capture_output=True, text=True, timeout=110,
                            cwd=str(tmp_path), env=demo_env(GATEWAY_AGENT="echo"))
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "running agent 'echo'" in out
    assert "bot: echo: ```python\n     def f():\n         return 1\n     ```\n" in out
    echoed = "".join(re.findall(r"bot: (?:echo: )?(x+)", out))
    assert echoed == long_line, "the long reply came in pieces, every one printed"
    assert re.search(r"web chat: open http://127\.0\.0\.1:\d+/ ", out), out
    logs = re.search(r"logs in (\S+) \(removed at exit", out)
    assert logs is not None, out
    assert not Path(logs.group(1)).exists()


def test_ctrl_c_stops_the_processes_before_their_redis(tmp_path: Path) -> None:
    """The terminal's Ctrl-C reaches the demo alone: it stops the worker and the listener,
    then the embedded Redis, so the worker's log holds no error of a Redis gone first."""
    with DemoAtATerminal(tmp_path, "--keep-logs", GATEWAY_AGENT="echo") as demo:
        demo.type("hello")
        demo.wait_for("echo: hello")
        demo.press(b"\x03")  # Ctrl-C
        demo.wait_exit(90)  # (stopping the processes may take their whole stop budget)
    logs = re.search(r"logs in (\S+) \(kept\)", demo.shown())
    assert logs is not None, demo.shown()[-2000:]
    worker_log = (Path(logs.group(1)) / "worker.log").read_text()
    for error in ("Connection to broker lost", "Connection refused", "Couldn't ack",
                  "CRITICAL", "Traceback"):
        assert error not in worker_log, worker_log[-3000:]
    shutil.rmtree(logs.group(1))


def test_ctrl_d_at_a_terminal_quits_at_once_after_a_dozen_messages(tmp_path: Path) -> None:
    """More messages than GATEWAY_HISTORY_TURNS keeps (10): the quit still sees each one is
    done (taken in, and the chat idle since) at once, and exits as soon as its processes
    stopped (within seconds on an idle host; their stop budget on a loaded one)."""
    with DemoAtATerminal(tmp_path, GATEWAY_AGENT="echo") as demo:
        for n in range(12):
            demo.type(f"note {n}")
        deadline = time.monotonic() + 60
        while demo.shown().count("echo: note ") < 12:
            assert time.monotonic() < deadline, demo.shown()[-2000:]
            time.sleep(0.05)
        quit_at = time.monotonic()
        demo.press(b"\x04")  # Ctrl-D
        demo.wait_for(QUITTING, timeout_s=10)
        settled_s = time.monotonic() - quit_at
        assert demo.wait_exit(90) == 0, demo.shown()[-2000:]
        took_s = time.monotonic() - quit_at
    assert "not done after" not in demo.shown(), "every message seen done: no settle wait"
    assert settled_s < 5, f"Ctrl-D took {settled_s:.1f} s to begin quitting"
    assert took_s < 45, f"Ctrl-D took {took_s:.1f} s to quit (the settle wait is 60 s)"


class DemoAtATerminal:
    """`feishu-gateway demo` on a pseudo-terminal, as a person runs it."""

    def __init__(self, workdir: Path, *argv: str, **env: str) -> None:
        import pty

        self.primary, secondary = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.ops.cli", "demo", "--port", "0", *argv],
            stdin=secondary, stdout=secondary, stderr=secondary, cwd=str(workdir),
            env=demo_env(**env), start_new_session=True,
            # (as a person's shell starts it: Ctrl-C not ignored, whatever ran the tests)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(secondary)
        self._screen: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.primary, 4096)
            except OSError:  # the process is gone: the pty closed
                return
            if not chunk:
                return
            self._screen.append(chunk)

    def __enter__(self) -> DemoAtATerminal:
        self.wait_for("chat oc_demo_chat: ", START_TIMEOUT_S)
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        os.close(self.primary)

    def shown(self) -> str:
        return b"".join(self._screen).decode(errors="replace")

    def wait_for(self, text: str, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.shown():
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                self.shown()[-2000:]
            time.sleep(0.05)

    def type(self, line: str) -> None:
        os.write(self.primary, f"{line}\n".encode())

    def press(self, key: bytes) -> None:
        """A key the terminal turns into a signal or an end of input (Ctrl-C, Ctrl-D)."""
        if key == b"\x03":  # (the terminal's line discipline: SIGINT to its foreground)
            os.killpg(self.proc.pid, signal.SIGINT)
            return
        os.write(self.primary, key)

    def wait_exit(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)
