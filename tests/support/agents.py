"""A scripted agent for the tests: what it does is written in the message text.

- `sleep S ...`  sleeps S seconds, returning early once the turn is cancelled
- `hang S ...`   sleeps S seconds and ignores cancellation
- `crash`        kills its own process (SIGKILL), like an out-of-memory kill
- `crashonce T`  the same, only the first time token T is seen (in Redis)
- `whoami`       replies with its session key and how many turns this agent object saw
- `long N`       replies N characters that start with a nonce new on every run (an LLM
                 never answers the same twice): a stitched answer shows two nonces
- `form S`       asks TEST_FORM (timeout S s) and replies
                 `form: <state> <values as sorted JSON> by <who or ->`
- `approve S K P` asks the chat to approve prompt P (timeout S s, remembered under key K)
                 and replies `decision: <outcome>`
- `stream N D [K]` answers in N pieces `w<i> `, D seconds apart (returning early once the
                 turn is cancelled); with K, kills its process after K pieces on the first
                 run of this message only (a crash mid-stream)
- `streamonce N D` as `stream N D` on the first run of this message; a run again answers
                 `plain on a run again` in one piece
- `steps N D`    reports N progress steps `step <i>` (`turn.progress`), D seconds apart
                 (returning early once the turn is cancelled), then replies
                 `done after <n> steps`
- `table N`      replies a markdown table of N rows
- `recent N`     replies `recent: <sender>: <text> | …`, the chat's last N messages before
                 it (`turn.recent`), a bot's as `bot`; `recent failed: <error class>` when
                 the read fails
- `quoted`       replies `quote: <the text of the message it replied to>`
- `chain`        replies `chain: <sender>: <text> [<kinds of its attachments>] < …`, the
                 messages it replied to, nearest first (`turn.message.quote_chain`)
- a file message replies `fetched <n> bytes: <first 20>` (or why it could not, e.g. too large)
- `media`        answers a text, an image (chart.png) and a file (data.csv)
- `sendnow`      sends an image at once (`turn.send`), then answers `sent om_`
- `badmedia`     makes an Image of bytes that are none and answers the error it got
- `fetchall ...`  fetches every attachment of the turn (`turn.attachments`) and replies
                 `fetched <kind> <n> bytes: <first 8>, ...`
- `boom ...`     raises
- `flaky T`      raises the first time token T is seen (in Redis), echoes after that
- `silent ...`   returns None
- anything else  replies `echo: <text>`
A merged turn (busy mode merge) does what its last message says; `echo:` repeats the
turn's whole text.
Every start and end is recorded in Redis (`test:events:<chat_id>`, through the client the
worker process hands the factory) with the pid.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import redis

from gateway.chats.keys import ChatKeys
from gateway.chats.store_types import text_of
from gateway.core.errors import GatewayError
from gateway.core.media import BadMedia, File, Image
from gateway.core.model import AgentContext, FormField, Reaction, Reply, Turn
from gateway.core.settings import load_settings

TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082")
"""A 1x1 PNG."""


TEST_FORM = (
    FormField("name", "Your name", required=True, max_chars=40),
    FormField("level", "Level", "select", required=True, options=("low", "medium", "high")),
    FormField("tags", "Tags", "multi_select", options=("a", "b", "c")),
    FormField("due", "Due", "date"),
    FormField("notify", "Notify me", "checkbox"),
)
"""The form `form S` asks."""


def context_for_tests(client: redis.Redis | None = None) -> AgentContext:
    """What a worker process hands its factory, for agents a test builds in its own process:
    default settings and `client` (else one that connects nowhere until it is used)."""
    return AgentContext(load_settings(_env_file=None), client or redis.Redis(), "test:0:0000")


def events_key(chat_id: str) -> str:
    return f"test:events:{chat_id}"


def _began_ms(client: redis.Redis, turn: Turn) -> int | None:
    """When the turn's messages were fixed, in Redis's ms: the lease's `since_ms`, written
    by the step that made it run (start, or the claim a worker went straight on with); None
    once another turn holds the chat (or under another key layout)."""
    thread = turn.message.thread_id  # (a topic's turn: its topic's lease, order scope thread)
    states = [f"{turn.chat_id}/{thread}"] if thread else []
    for state in [*states, turn.chat_id]:
        fence, since = client.hmget(ChatKeys(state).lease, ["fence", "since_ms"])
        if fence is not None and since is not None and int(fence) == turn.fence:
            return int(since)
    return None


def _record(client: redis.Redis, turn: Turn, event: str) -> None:
    """Append to the chat's event list (a start says when its messages were fixed:
    `began_ms`); waits out a Redis restart (up to 30 s)."""
    record: dict[str, object] = {
        "event": event, "message_id": turn.message_id, "text": turn.text,
        "message_ids": [m.message_id for m in turn.messages],
        "fence": turn.fence, "pid": os.getpid(), "thread": threading.get_ident(), "t": time.time(),
    }
    deadline = time.monotonic() + 30
    while True:
        try:
            if event == "start":
                record["began_ms"] = _began_ms(client, turn)
            client.rpush(events_key(turn.chat_id), json.dumps(record))
            return
        except (redis.ConnectionError, redis.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class ScriptedAgent:
    def __init__(self, session_key: str, client: redis.Redis) -> None:
        self.session_key = session_key
        self.redis = client
        self.turns = 0

    def run(self, turn: Turn) -> Reply:
        said = turn.message.text  # merged turns (busy mode merge): the last message says
        if said.startswith("stream "):
            _record(self.redis, turn, "start")
            return _pieces(self.redis, turn, *said.split()[1:])
        if said.startswith("streamonce "):  # the first run streams, a run again does not
            _record(self.redis, turn, "start")
            if self.redis.set(f"test:streamed:{turn.message_id}", "1", nx=True, ex=600):
                return _pieces(self.redis, turn, *said.split()[1:])
            return "plain on a run again"
        _record(self.redis, turn, "start")
        self.turns += 1
        try:
            word, _, rest = said.partition(" ")
            if word == "crash" or word == "crashonce" and self.redis.set(
                    f"test:crashonce:{rest}", "1", nx=True, ex=600):
                os.kill(os.getpid(), signal.SIGKILL)
            if word == "form":
                answer = turn.ask("Book a review", TEST_FORM, timeout_s=float(rest.split()[0]))
                return (f"form: {answer.state} "
                        f"{json.dumps(answer.values, sort_keys=True)} by {answer.by or '-'}")
            if word == "approve":
                timeout_s, key, prompt = rest.split(" ", 2)
                return f"decision: {turn.approve(prompt, float(timeout_s), key=key)}"
            if word == "media":  # text, an image and a file, as one answer
                return ["here you go", Image(TINY_PNG, name="chart.png"),
                        File(b"a,b\n1,2\n", name="data.csv")]
            if word == "sendnow":  # an image at once, then the answer
                sent = turn.send(Image(TINY_PNG, name="now.png"))
                return f"sent {sent[:3]}"
            if word == "badmedia":  # what Feishu would not take: the agent learns why
                try:
                    Image(b"plain text, no image")
                except BadMedia as error:
                    return f"refused: {error}"
                return "accepted?"
            if word == "fetchall":  # every attachment of the turn, as data
                try:
                    got = [turn.fetch(a) for a in turn.attachments]
                except GatewayError as error:
                    return f"not fetched: {type(error).__name__}"
                return "fetched " + ", ".join(
                    f"{a.kind} {len(d)} bytes: {d[:8].decode(errors='replace')}"
                    for a, d in zip(turn.attachments, got, strict=True))
            if turn.message.message_type == "file":
                try:
                    data = turn.fetch(turn.attachments[0])
                except GatewayError as error:
                    return f"not fetched: {type(error).__name__}"
                return f"fetched {len(data)} bytes: {data[:20].decode(errors='replace')}"
            if word == "steps":
                count, gap_s = rest.split()[:2]
                done = 0
                for n in range(int(count)):
                    turn.progress(f"step {n}")
                    done += 1
                    deadline = time.monotonic() + float(gap_s)
                    while time.monotonic() < deadline and not turn.cancelled():
                        time.sleep(0.01)
                    if turn.cancelled():
                        break
                return f"done after {done} steps"
            if word == "recent":
                try:
                    lines = turn.recent(int(rest.split()[0]))
                except GatewayError as error:
                    return f"recent failed: {type(error).__name__}"
                return "recent: " + " | ".join(
                    f"{'bot' if line.from_app else line.sender_id}: {line.text}"
                    for line in lines)
            if word == "quoted":
                return f"quote: {turn.message.quote}"
            if word == "chain":
                return "chain: " + " < ".join(
                    f"{'bot' if q.from_app else q.sender_id}: {q.text}"
                    + (f" [{' '.join(a.kind for a in q.attachments)}]" if q.attachments
                       else "") for q in turn.message.quote_chain)
            if word == "table":
                rows = "\n".join(f"| row {n} | {n * n} |" for n in range(int(rest)))
                return f"Squares:\n\n| n | n² |\n| --- | ---: |\n{rows}\n\nDone."
            if word == "whoami":
                return f"session {self.session_key} turn {self.turns} pid {os.getpid()}"
            if word == "long":
                nonce = f"answer-{uuid.uuid4().hex[:8]} "
                size = int(rest.split()[0])
                return (nonce * (size // len(nonce) + 1))[:size]
            if word == "hang":
                time.sleep(float(rest.split()[0]))
            elif word == "sleep":
                deadline = time.monotonic() + float(rest.split()[0])
                while time.monotonic() < deadline and not turn.cancelled():
                    time.sleep(0.05)
            elif word == "boom":
                raise RuntimeError("scripted failure")
            elif word == "flaky" and self.redis.set(f"test:flaky:{rest}", "1", nx=True, ex=600):
                raise RuntimeError("scripted first failure")
            elif word == "silent":
                return None
            return f"echo: {turn.text}"
        finally:
            _record(self.redis, turn, "end")


def _pieces(client: redis.Redis, turn: Turn, count: str, gap_s: str,
            crash_after: str = "") -> Iterator[str]:
    first_run = bool(crash_after) and bool(client.set(f"test:crashed:{turn.message_id}", "1",
                                                      nx=True, ex=600))
    for n in range(int(count)):
        if first_run and n == int(crash_after):
            os.kill(os.getpid(), signal.SIGKILL)
        yield f"w{n} "
        deadline = time.monotonic() + float(gap_s)
        while time.monotonic() < deadline and not turn.cancelled():
            time.sleep(0.01)
        if turn.cancelled():
            return


def reactions_key(chat_id: str) -> str:
    return f"test:reactions:{chat_id}"


class ScriptedFactory:
    """`tests.support.agents:scripted`: builds ScriptedAgents; its `on_reaction` hook
    records each reaction it is handed (`reactions_key`: JSON with the worker's pid)."""

    def __call__(self, session_key: str, context: AgentContext) -> ScriptedAgent:
        return ScriptedAgent(session_key, context.redis)

    def on_reaction(self, reaction: Reaction, context: AgentContext) -> None:
        context.redis.rpush(reactions_key(reaction.chat_id),
                            json.dumps({**reaction.to_dict(), "pid": os.getpid()}))


scripted = ScriptedFactory()


AGENTS_KEY = "test:agents"
"""Every tracked agent's life: `{"event": built|run|soft|hard, "agent", "session", "pid"}`."""


def _note(client: redis.Redis, event: str, agent: str, session: str) -> None:
    client.rpush(AGENTS_KEY, json.dumps({"event": event, "agent": agent, "session": session,
                                           "pid": os.getpid()}))


class TrackedAgent:
    """Echoes, and records when it is built, runs and is released (softly or fully);
    `release_s` makes each release take that long."""

    def __init__(self, session_key: str, client: redis.Redis, release_s: float) -> None:
        self.session_key = session_key
        self.redis = client
        self.id = uuid.uuid4().hex[:8]
        self._release_s = release_s
        _note(client, "built", self.id, session_key)

    def run(self, turn: Turn) -> str:
        _note(self.redis, "run", self.id, self.session_key)
        return f"echo: {turn.text}"

    def soft_release(self) -> None:
        time.sleep(self._release_s)
        _note(self.redis, "soft", self.id, self.session_key)

    def release(self) -> None:
        time.sleep(self._release_s)
        _note(self.redis, "hard", self.id, self.session_key)


class TrackedFactory:
    """`tests.support.agents:tracked`. Its configuration is the text of the file named by
    TEST_AGENT_CONFIG (a test edits it to change the configuration of running workers);
    TEST_AGENT_RELEASE_S slows every release down."""

    def __call__(self, session_key: str, context: AgentContext) -> TrackedAgent:
        return TrackedAgent(session_key, context.redis,
                            float(os.environ.get("TEST_AGENT_RELEASE_S", "0")))

    def signature(self, context: AgentContext) -> str:
        path = os.environ.get("TEST_AGENT_CONFIG", "")
        if not path:
            return ""
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()


tracked = TrackedFactory()


def memory_key(session_key: str) -> str:
    return f"test:memory:{session_key}"


class RememberingAgent:
    """`tests.support.agents:remembering`, a stateful agent: it keeps what its session said in
    memory, and a copy in Redis that only a newly built agent reads (as a real one would
    load a saved conversation). An agent kept in a process after another process ran a turn
    of its session does not know that turn. Replies `heard: <each text so far, ' | '
    between>`; records when it is built and runs (`AGENTS_KEY`)."""

    def __init__(self, session_key: str, client: redis.Redis) -> None:
        self.session_key = session_key
        self.redis = client
        self.id = uuid.uuid4().hex[:8]
        self.said = [text_of(raw) for raw in client.lrange(memory_key(session_key), 0, -1)]
        _note(client, "built", self.id, session_key)

    def run(self, turn: Turn) -> str:
        _note(self.redis, "run", self.id, self.session_key)
        self.said.append(turn.text)
        self.redis.rpush(memory_key(self.session_key), turn.text)
        return "heard: " + " | ".join(self.said)


def remembering(session_key: str, context: AgentContext) -> RememberingAgent:
    return RememberingAgent(session_key, context.redis)
