"""The chaos monkey and the bookkeeping of the chaos suite (test_chaos.py)."""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from gateway.broker.names import RELEASE_QUEUE
from gateway.broker.release_post import RELEASE_QUEUE_CAP_MESSAGES
from gateway.listener.catchup.catchup_book import job_key
from gateway.simulator import SendFaults, SentMessage
from gateway.worker.sending import LATE_ANSWER_NOTE
from tests.support.agents import events_key
from tests.support.clocks import SteppedClock
from tests.support.rig import Rig

FAULTS = ("worker-kill", "listener-kill", "ws-drop", "redis-restart", "send-errors",
          "redis-clock", "listener-clock", "identity-fail", "listener-outage")
REDIS_STEP_S = 300.0
"""The Redis clock's steps: back by this, then ahead of the host's by as much, then back."""
LISTENER_AHEAD_S = 45 * 60.0
CATCHUP_AFTER_S = 2.0
"""FEISHU_CATCHUP_AFTER_S of the run: a gap without any listener longer than this is read
back from the messages list API."""
OUTAGE_S = 5.0
"""How long no listener runs, while users write and Feishu pushes nothing (and never will)."""
SEND_FAULTS = SendFaults(http_5xx_json=0.05, http_5xx_html=0.05, rate_limit_429=0.03,
                         rate_limit_400=0.02, reset_after_create=0.02, seed=7)


class Monkey:
    """Injects the enabled faults on a schedule until `stop()`, then puts things right."""

    def __init__(self, rig: Rig, enabled: set[str], run_s: float, seed: int = 1,
                 redis_clock: SteppedClock | None = None) -> None:
        self.rig = rig
        self.redis_clock = redis_clock
        self.enabled = enabled
        self.run_s = run_s
        self.injected: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-monkey", daemon=True)
        self.errors: list[str] = []
        self.began = time.monotonic()
        self.timeline: list[str] = []
        """When each scheduled fault came (seconds into the run): a lost message's story."""

    def start(self) -> Monkey:
        self.began = time.monotonic()
        if "send-errors" in self.enabled:
            self.rig.sim.set_send_faults(SEND_FAULTS)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wait for the schedule's end (`run_s`), then restore everything."""
        self._thread.join(self.run_s + 120)
        self.rig.sim.set_send_faults(None)
        for kind, count in self.rig.sim.fault_counts.items():
            self.injected[f"send {kind}"] = count

    def _run(self) -> None:
        try:
            self._schedule()
        except Exception as error:  # noqa: BLE001 (reported by the test, never swallowed)
            self.errors.append(repr(error))

    def _schedule(self) -> None:
        start = time.monotonic()
        plan: list[tuple[float, str]] = []
        if "listener-kill" in self.enabled:
            plan += [(0.25, "second-listener"), (0.5, "listener-kill"), (0.8, "second-stop")]
        if "redis-restart" in self.enabled:
            plan.append((0.4, "redis-restart"))
        if "redis-clock" in self.enabled:
            plan += [(0.3, "redis-clock-back"), (0.55, "redis-clock-ahead"),
                     (0.75, "redis-clock-right")]
        if "identity-fail" in self.enabled:
            plan += [(0.1, "identity-down"), (0.45, "identity-up")]
        if "listener-outage" in self.enabled:
            plan += [(0.62, "outage-start"), (0.62 + OUTAGE_S / self.run_s, "outage-end")]
        plan.sort()
        next_kill = next_drop = 3.0
        second = None
        while not self._stopping.wait(0.2):
            elapsed = time.monotonic() - start
            if elapsed >= self.run_s:
                break
            while plan and elapsed >= plan[0][0] * self.run_s:
                _, action = plan.pop(0)
                self.timeline.append(f"{elapsed:.1f}s {action}")
                second = self._once(action, second)
            if "worker-kill" in self.enabled and elapsed >= next_kill:
                workers = self.rig.fleet.workers()
                if workers:
                    self._rng.choice(workers).kill()  # the fleet starts it again
                    self.injected["worker SIGKILL"] += 1
                next_kill = elapsed + self._rng.uniform(3, 6)
            if "ws-drop" in self.enabled and elapsed >= next_drop:
                self.rig.sim.drop_connections()
                self.injected["websocket drop"] += 1
                next_drop = elapsed + self._rng.uniform(2, 5)
        for _, action in plan:  # the run ended early: finish the plan so all is restored
            second = self._once(action, second)

    def _once(self, action: str, second: Any) -> Any:
        fleet = self.rig.fleet
        if action == "second-listener":
            self.injected["second listener"] += 1
            return self.rig.listener()
        if action in ("listener-kill", "identity-down"):
            if action == "identity-down":  # the open API fails as a listener starts
                self.rig.sim.fail_bot_info("5xx-html")
                self.injected["bot info failing at a listener's start"] += 1
            first = next(p for p in fleet.started if p.name.startswith("listener") and p.alive)
            first.kill()
            self.injected["listener SIGKILL"] += 1
            self.rig.listener()
        elif action == "identity-up":
            self.rig.sim.fail_bot_info(None)
        elif action == "outage-start":  # every listener dies; Feishu gives their pushes up
            self.rig.sim.set_outage(True)
            for proc in fleet.started:
                if proc.name.startswith("listener"):
                    proc.kill()
            self.injected["listener outage"] += 1
        elif action == "outage-end":
            self.rig.sim.set_outage(False)
            self.rig.listener()
        elif action.startswith("redis-clock") and self.redis_clock is not None:
            step = {"back": -REDIS_STEP_S, "ahead": 2 * REDIS_STEP_S,
                    "right": -REDIS_STEP_S}[action.rsplit("-", 1)[1]]
            self.redis_clock.step(step)
            self.injected[f"redis clock {step:+.0f}s"] += 1
        elif action == "second-stop" and second is not None:
            second.stop()
        elif action == "redis-restart":
            self.rig.redis.crash()
            self.injected["redis restart"] += 1
            self._stopping.wait(1.0)
            self.rig.redis.start()
        return second


FIGURES = "chaos figures"
"""The name of a run's figures among its report's `user_properties`: the report reaches the
session's summary from whichever process ran the test (pytest-xdist runs the suite in two)."""


@dataclass
class Figures:
    faults: str
    sent: int = 0
    answered: int = 0
    lost: int = 0
    duplicated: int = 0
    gave_up: int = 0
    failed: int = 0
    merged: int = 0
    """Messages answered by one reply together with others (busy mode merge)."""
    caught_up: int = 0
    """Messages read back after the listener outage, answered with the late note."""
    order_violations: int = 0
    late_arrivals: int = 0
    stuck_chats: int = 0
    keys_without_ttl: int = 0
    live_cards: int = 0
    """Approval cards still asking after the run."""
    release_queue: int = 0
    quiescence_s: float = 0.0
    injected: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def line(self) -> str:
        return "chaos " + json.dumps(self.__dict__, sort_keys=True)


def asks(card: SentMessage) -> bool:
    """An approval card that still has its buttons."""
    return any("decision" in (action.get("value") or {})
               for element in (card.content or {}).get("elements", ())
               for action in element.get("actions", ()))


def is_approval_card(message: SentMessage) -> bool:
    title = ((message.content or {}).get("header") or {}).get("title") or {}
    return message.msg_type == "interactive" and str(title.get("content", "")).startswith(
        "Approval")


def approval_cards(rig: Rig) -> list[SentMessage]:
    return [m for m in rig.sim.sent_messages() if is_approval_card(m)]


class Clicker:
    """The users of the approval chats: each live approval card is clicked ("once") by
    its requester, and clicked again while it still asks (a click lost in a fault)."""

    AGAIN_AFTER_S = 3.0

    def __init__(self, rig: Rig) -> None:
        self.rig = rig
        self.clicks = 0
        self._clicked: dict[str, float] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-clicker", daemon=True)

    def start(self) -> Clicker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stopping.wait(0.3):
            for card in approval_cards(self.rig):
                if asks(card) and time.monotonic() - self._clicked.get(
                        card.message_id, -self.AGAIN_AFTER_S) >= self.AGAIN_AFTER_S:
                    self._click(card)

    def _click(self, card: SentMessage) -> None:
        value = next(dict(a["value"]) for e in card.content["elements"]
                     for a in e.get("actions", ()) if a["value"].get("decision") == "once")
        try:
            self.rig.sim.send_card_action(card.chat_id, card.message_id, "ou_user_1", value)
        except TimeoutError:  # no listener connected for a while: clicked again later
            return
        self._clicked[card.message_id] = time.monotonic()
        self.clicks += 1


TAG = re.compile(r"<\d\d#\d+>")
"""A message's tag in a reply's text (test_chaos.tag)."""


def replies_by_message(rig: Rig, tags: dict[str, str]) -> dict[str, list[str]]:
    """Each input's answers (approval cards apart): the replies to it and the replies that
    repeat its tag (a merged turn answers its last message and echoes every one)."""
    by_tag = {tag: message_id for message_id, tag in tags.items()}
    answers: dict[str, list[str]] = defaultdict(list)
    for message in rig.sim.sent_messages():
        if message.reply_to and not is_approval_card(message):
            parents = {message.reply_to} | {by_tag[t] for t in TAG.findall(message.text)
                                            if t in by_tag}
            for parent in parents:
                answers[parent].append(message.text)
    return answers


def count_replies(rig: Rig, sent: dict[str, list[str]], tags: dict[str, str],
                  figures: Figures) -> None:
    """One distinct bot message per input (an approval card apart): answered, lost or
    duplicated; and how many were answered together with others (merged)."""
    by_parent = replies_by_message(rig, tags)
    for message_ids in sent.values():
        for message_id in message_ids:
            texts = by_parent.get(message_id, [])
            if not texts:
                figures.lost += 1
                figures.examples.append(f"lost {message_id}")
            elif len(texts) > 1:
                figures.duplicated += 1
                figures.examples.append(f"twice {message_id}: {texts}")
            else:
                figures.answered += 1
                figures.merged += len(TAG.findall(texts[0])) > 1
                figures.caught_up += texts[0].startswith(LATE_ANSWER_NOTE)
                figures.gave_up += texts[0].startswith("Sorry, this message could not")
                figures.failed += texts[0].startswith("Sorry, something went wrong")


def story(rig: Rig, message_id: str, began: float) -> str:
    """What became of a message the bot never answered: every frame that carried it
    (seconds into the run, written to a client or not, its ACKs' codes) and the first
    listener lines that name its event."""
    frames = rig.sim.state.frames_of(message_id)
    tries = [f"{frame.sent_at - began:.1f}s{'' if written else ' unsent'} {codes or '-'}"
             for _, frame, written, codes in frames]
    keys = {frame.event_key for _, frame, _, _ in frames} | {message_id}
    lines = [line[11:23] + line[line.find(" ", 24):][:140]
             for line in rig.fleet.logs("listener").splitlines()
             if any(key in line for key in keys)]
    return f"lost {message_id}: tries {tries}; listener: {lines[:4]}"


def count_order(rig: Rig, client: redis.Redis, sent: dict[str, list[str]],
                figures: Figures, redis_clock: SteppedClock | None,
                topics: Mapping[str, str] | None = None) -> None:
    """A message is never overtaken by a later one while it waited in its chat's inbox: it
    was admitted (ACKed) before the later one's turn fixed its messages (`began_ms`, on
    Redis's clock, `redis_clock` when the run steps it), yet started after it. One that
    Feishu could only deliver after that (refused during the Redis restart or while the
    listener could not start) is a late arrival, not a violation; so is one read back after
    the outage that a later, pushed one overtook. Two read back keep their order. In a
    group with topics (`topics`: message id → its thread), the order is each topic's."""
    admitted: dict[str, float] = {}
    for ack in rig.sim.acks:
        if ack.code == 200 and ack.message_id and ack.message_id not in admitted:
            admitted[ack.message_id] = ack.at
    pushed = {ack.message_id for ack in rig.sim.acks}
    for chat_id, message_ids in sent.items():
        first_start: dict[str, float] = {}
        began: dict[str, float] = {}
        for raw in client.lrange(events_key(chat_id), 0, -1):
            event = json.loads(raw)
            if event["event"] == "start":  # a merged turn starts each of its messages
                for message_id in event.get("message_ids") or [event["message_id"]]:
                    if message_id not in first_start:
                        first_start[message_id] = event["t"]
                        began[message_id] = began_at(event, redis_clock)
        for i, earlier in enumerate(message_ids):
            for later in message_ids[i + 1:]:
                if topics and topics.get(earlier, "") != topics.get(later, ""):
                    continue  # (topics run side by side)
                if earlier in first_start and later in first_start and \
                        first_start[later] < first_start[earlier]:
                    both_read_back = earlier not in pushed and later not in pushed
                    if both_read_back or admitted.get(earlier, float("inf")) < began[later]:
                        figures.order_violations += 1
                        figures.examples.append(
                            f"{later} overtook {earlier} in {chat_id}: "
                            + detail(rig, earlier, later, first_start, began))
                    else:
                        figures.late_arrivals += 1


def began_at(start: dict[str, Any], redis_clock: SteppedClock | None) -> float:
    """The host time at which a turn's messages were fixed, from its start event: Redis's
    `began_ms` (whole ms, so at or before it) on the host's clock, the latest reading not
    after the event (a step back made Redis's clock read it twice); the event's own time
    (later) when it has none."""
    started = float(start["t"])
    if start.get("began_ms") is None:
        return started
    redis_s = start["began_ms"] / 1000
    readings = [redis_s] if redis_clock is None else redis_clock.host_times(redis_s)
    return max((t for t in readings if t <= started), default=started)


def detail(rig: Rig, earlier: str, later: str, first_start: dict[str, float],
           began: dict[str, float]) -> str:
    """What happened to the two messages of an order violation, in seconds from the first
    ACK of the earlier one: its ACKs (code@t), the later one's, when the later one's turn
    fixed its messages and when each started."""
    acks = rig.sim.acks
    base = min((a.at for a in acks if a.message_id == earlier), default=0.0)

    def history(message_id: str) -> str:
        return ",".join(f"{a.code}@{a.at - base:.3f}" for a in acks
                        if a.message_id == message_id)

    return (f"earlier acks {history(earlier)} started {first_start[earlier] - base:.3f}; "
            f"later acks {history(later)} began {began[later] - base:.3f} "
            f"started {first_start[later] - base:.3f}")


def count_leftovers(rig: Rig, client: redis.Redis, chats: list[str],
                    figures: Figures) -> None:
    """Chats still active, per-chat keys without a TTL, approval cards still asking, the
    release queue's length."""
    for card in approval_cards(rig):
        if card.chat_id in chats and asks(card):
            figures.live_cards += 1
            figures.examples.append(f"live card {card.message_id} in {card.chat_id}")
    job = client.hgetall(job_key(rig.sim.app_id))
    if job:
        figures.examples.append(f"catch-up still pending: {job}")
    figures.release_queue = int(client.llen(RELEASE_QUEUE))
    if figures.release_queue > RELEASE_QUEUE_CAP_MESSAGES:
        figures.examples.append(f"release queue {figures.release_queue}")
    for chat_id in chats:
        if client.zscore("gw:chats", chat_id) is not None:
            figures.stuck_chats += 1
            figures.examples.append(f"stuck {chat_id}")
    for key in client.scan_iter(match="gw:{*", count=1000):
        if client.pttl(key) == -1:
            figures.keys_without_ttl += 1
            figures.examples.append(f"no TTL: {key}")

