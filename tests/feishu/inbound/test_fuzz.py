"""Hypothesis over raw Feishu event payloads: normalisation (gateway.feishu.inbound.events and
the content renderers), admission and the listener's ingest step on a real Redis.

- Normalisation turns any payload into a `Message` that can be stored and read back, or
  raises `MalformedEvent` (the documented error); nothing else escapes.
- `admit()` gives a verdict for any arrival under any rules (a reason whenever it refuses).
- `Intake.on_frame` over valid messages interleaved with hostile frames: no exception
  escapes, each frame says what happened to it in exactly one log line (WARNING when it was
  dropped as unreadable, naming why), and every valid message is in its chat's inbox
  exactly once, readable, next to nothing that should not be there.

Deterministic (derandomize, no example database); about a dozen seconds in all.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.broker.publisher import Publisher
from gateway.chats.keys import CONTROL_KEY, INDEX_KEY
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig, entry_message
from gateway.core.errors import MalformedEvent
from gateway.core.logs import shown
from gateway.core.model import Message
from gateway.core.rules import DM_POLICIES, GROUP_POLICIES, GroupRule, Rules
from gateway.feishu.inbound.admission import Arrival, admit, arrival_of
from gateway.feishu.inbound.change_events import CHANGES, parse_chat_event
from gateway.feishu.inbound.events import message_text, parse_command, parse_message
from gateway.listener.intake import CARD_EVENT, MESSAGE_EVENT, Intake
from gateway.listener.outbox import Outbox
from gateway.ops.embedded_redis import EmbeddedRedis
from tests.support.rig import client_of

BOT, APP, CHAT = "ou_bot", "cli_fuzz", "oc_fuzz"
MAX_CHARS = 200
RULES = Rules(require_mention=True)  # the default gating: groups need the bot's @mention
MISSING = object()  # a field left out of its object

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None)
SLOW = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow, HealthCheck.data_too_large])

# --- strategies -------------------------------------------------------------------------

SPECIALS = ["", " ", "\n\t ", "|", "om_a|b", "@_user_1", "@_user_2", "@_all", "\x00",
            "\ud800", "x\udfffy", "/stop", "/new", "{", "}", "null", "[]", "{}", "é漢字🙂",
            "\u202e\u200b", "\r\n", "Infinity", "NaN"]
HUGE = {"digits": "1" * 5000, "brackets": "[" * 3000, "long": "x" * 20_000,
        "deep": "[" * 5000 + "]" * 5000, "deep int": '{"text": ' + "1" * 5000 + "}"}
huge = st.sampled_from(sorted(HUGE)).map(HUGE.__getitem__)  # (a short repr in reports)
hostile_str = st.one_of(
    st.text(max_size=20), st.sampled_from(SPECIALS), huge,
    st.text(st.characters(codec=None, categories=["Cs", "Cc", "Zs", "So", "Lo"]),
            max_size=8))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), hostile_str)
junk = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(hostile_str, inner, max_size=3), max_leaves=8)


def mostly(usual: st.SearchStrategy[Any], odds: int,
           *others: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` `odds` times as often as any one of `others` (one_of would not do: it draws
    each distinct branch about as often); shrinks towards `usual`."""
    return st.sampled_from([*[usual] * odds, *others]).flatmap(lambda chosen: chosen)


def sometimes_bad(good: st.SearchStrategy[Any], odds: int = 5) -> st.SearchStrategy[Any]:
    """`good` `odds` times in `odds + 1`; else missing, None or a value of any other type."""
    return mostly(good, odds, st.one_of(st.just(MISSING), st.none(), junk))


def obj(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An object whose fields may each be missing (`sometimes_bad` draws MISSING)."""
    return st.fixed_dictionaries(fields).map(
        lambda d: {k: v for k, v in d.items() if v is not MISSING})


TAGS = ["text", "a", "at", "img", "media", "emotion", "code_block", "hr", "md", "unknown"]
element = obj(tag=sometimes_bad(st.sampled_from(TAGS)), text=sometimes_bad(hostile_str),
              href=sometimes_bad(hostile_str), user_id=sometimes_bad(hostile_str),
              user_name=sometimes_bad(hostile_str), image_key=sometimes_bad(hostile_str),
              file_key=sometimes_bad(hostile_str), emoji_type=sometimes_bad(hostile_str),
              language=sometimes_bad(hostile_str))
paragraphs = sometimes_bad(st.lists(st.one_of(st.lists(st.one_of(element, element, junk),
                                                       max_size=4), junk), max_size=4))
post_body = obj(title=sometimes_bad(hostile_str), content=paragraphs)
post = st.one_of(post_body, st.dictionaries(st.sampled_from(["zh_cn", "en_us", "ja_jp"]),
                                            st.one_of(post_body, junk), max_size=2))
key, name, duration = (sometimes_bad(hostile_str), sometimes_bad(hostile_str),
                       sometimes_bad(st.one_of(st.integers(), hostile_str, st.floats())))
CONTENTS: dict[str, st.SearchStrategy[Any]] = {
    "text": obj(text=sometimes_bad(st.one_of(
        hostile_str, st.sampled_from(["@_user_1 hi", "@_all look", "hi @_user_2", "/stop"])))),
    "post": post,
    "image": obj(image_key=key),
    "file": obj(file_key=key, file_name=name),
    "audio": obj(file_key=key, duration=duration),
    "media": obj(file_key=key, image_key=key, file_name=name, duration=duration),
    "sticker": obj(file_key=key),
    "merge_forward": st.just("Merged and Forwarded Message"),
    "interactive": obj(title=sometimes_bad(hostile_str), elements=junk, header=sometimes_bad(
        obj(title=sometimes_bad(obj(content=sometimes_bad(hostile_str)))))),
    "share_chat": obj(chat_id=key),
    "share_user": obj(user_id=key),
    "location": obj(name=name, longitude=sometimes_bad(hostile_str),
                    latitude=sometimes_bad(hostile_str)),
    "todo": obj(task_id=key, summary=sometimes_bad(post_body)),
    "system": obj(template=name, from_user=junk, to_chatters=junk),
}
message_types = mostly(st.sampled_from(sorted(CONTENTS)), 6,
                       st.sampled_from(["hongbao", ""]), hostile_str)


def encoded(content: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """How `message.content` arrives: the JSON string of the content, mostly; else not
    JSON, JSON but not an object, the object itself, deep, huge."""
    return mostly(
        content.map(lambda c: c if isinstance(c, str) else json.dumps(c)), 5,
        content, junk, junk.map(json.dumps), hostile_str, huge,
        st.sampled_from(['{"duration": Infinity, "file_key": "k"}', '{"text": "\\ud800"}']))


ENCODED = {message_type: encoded(shape) for message_type, shape in CONTENTS.items()}
any_type = st.sampled_from(sorted(CONTENTS))


@st.composite
def contents(draw: st.DrawFn) -> tuple[Any, Any]:
    """(message_type, raw content) of a matching type, mostly."""
    message_type = draw(message_types)
    known = isinstance(message_type, str) and message_type in ENCODED
    return message_type, draw(ENCODED[message_type if known else draw(any_type)])


mention = st.one_of(obj(
    key=sometimes_bad(st.one_of(st.sampled_from(["@_user_1", "@_user_2", "@_all"]),
                                hostile_str)),
    id=sometimes_bad(obj(open_id=sometimes_bad(st.one_of(st.sampled_from([BOT, "ou_ann"]),
                                                         hostile_str)))),
    name=sometimes_bad(hostile_str)), junk)
ids = mostly(st.sampled_from(["om_f1", "om_f2", "om_f3", "om_f4", "om_f1|x"]), 3,
             hostile_str)
times = st.one_of(st.integers(-(2**70), 2**70).map(str), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=True, allow_infinity=True), hostile_str)
message_fields = obj(
    message_id=sometimes_bad(ids),
    chat_id=sometimes_bad(st.one_of(st.sampled_from([CHAT, "oc_other"]), hostile_str)),
    chat_type=sometimes_bad(st.one_of(st.sampled_from(["p2p", "group", "topic_group"]),
                                      hostile_str)),
    mentions=sometimes_bad(st.lists(mention, max_size=3)), create_time=sometimes_bad(times),
    update_time=sometimes_bad(times), parent_id=sometimes_bad(ids), root_id=sometimes_bad(ids),
    thread_id=sometimes_bad(ids))
senders = obj(
    sender_id=sometimes_bad(obj(open_id=sometimes_bad(st.one_of(
        st.sampled_from(["ou_user", BOT]), hostile_str)), user_id=key, union_id=key)),
    sender_type=sometimes_bad(st.one_of(st.sampled_from(["user", "app", "bot", ""]),
                                        hostile_str)),
    tenant_key=key)
headers = obj(
    event_id=sometimes_bad(hostile_str),
    event_type=sometimes_bad(st.sampled_from([MESSAGE_EVENT] * 6 + [
        CARD_EVENT, "im.chat.member.bot.added_v1"])),
    create_time=sometimes_bad(times), app_id=sometimes_bad(st.just(APP)), token=key,
    tenant_key=key)
spoilt = st.one_of(st.just(MISSING), st.none(), junk)


def spoil(draw: st.DrawFn, value: Any, odds: int) -> Any:
    """`value` `odds` times in `odds + 1`, else missing, None or junk (shrinks to `value`)."""
    return draw(spoilt) if draw(st.integers(0, odds)) == odds else value


def put(draw: st.DrawFn, target: dict[str, Any], odds: int, **fields: Any) -> dict[str, Any]:
    for name, value in fields.items():
        value = spoil(draw, value, odds)
        if value is not MISSING:
            target[name] = value
    return target


@st.composite
def payloads(draw: st.DrawFn) -> dict[str, Any]:
    """A schema-2.0 `im.message.receive_v1` payload, any part of it broken."""
    message_type, content = draw(contents())
    message = put(draw, draw(message_fields), 12, message_type=message_type, content=content)
    event = put(draw, {}, 12, sender=draw(senders), message=message)
    whole = put(draw, {}, 12, schema="2.0", header=draw(headers), event=event)
    # parse_message also takes the `event` part alone
    return event if draw(st.integers(0, 4)) == 4 else whole


raw_frames = mostly(
    payloads().map(lambda p: json.dumps(p).encode()), 8,
    payloads().map(lambda p: json.dumps(p).encode("utf-16")),
    st.binary(max_size=40), junk.map(lambda j: json.dumps(j).encode()),
    st.sampled_from([b"", b"null", b"[]", b'"x"', b"{}", b'{"header": 1}', b"\xff\xfe\x00",
                     b'{"header": {"event_type": 7}}']),
    huge.map(str.encode), huge.map(lambda h: b'{"header": {"event_type": "%s"}, "event": %s}'
                                   % (MESSAGE_EVENT.encode(), h.encode())))


def valid_event(message_id: str, text: str, create_ms: int) -> dict[str, Any]:
    """A well-formed group message addressing the bot, as Feishu sends it."""
    return {"schema": "2.0",
            "header": {"event_id": f"ev_{message_id}", "event_type": MESSAGE_EVENT,
                       "create_time": str(create_ms), "app_id": APP, "tenant_key": "t"},
            "event": {"sender": {"sender_id": {"open_id": "ou_user", "user_id": "u_user"},
                                 "sender_type": "user", "tenant_key": "t"},
                      "message": {"message_id": message_id, "chat_id": CHAT,
                                  "chat_type": "group", "message_type": "text",
                                  "create_time": str(create_ms),
                                  "content": json.dumps({"text": f"@_user_1 {text}"}),
                                  "mentions": [{"key": "@_user_1", "name": "Bot",
                                                "id": {"open_id": BOT}}]}}}


valid_texts = st.text(min_size=1, max_size=40).filter(
    lambda t: bool(t.strip()) and "@_" not in t and parse_command(t.strip()) is None)

# --- normalisation ----------------------------------------------------------------------


def check_storable(message: Message) -> None:
    """What the ingest step needs of a parsed message: text, UTF-8 (Redis encodes every
    argument), and an inbox entry that reads back as the same message."""
    assert message.text and message.message_id and message.chat_id
    for value in (message.message_id, message.chat_id, message.chat_type, message.text,
                  message.sender_open_id, message.message_type, message.thread_id,
                  message.root_id, message.parent_id, *message.mentioned_open_ids):
        assert isinstance(value, str)
        value.encode("utf-8")
    assert isinstance(message.create_time_ms, int)
    message.to_json().encode("utf-8")
    assert entry_message(f"{0:016d}|{message.message_id}|{message.to_json()}") == message


@FAST
@given(payloads(), st.sampled_from(["", BOT]), st.integers(1, MAX_CHARS))
@example({"event": {"sender": {}, "message": {"message_id": "m", "chat_id": "c",
                                              "message_type": "text", "content": "1" * 5000}}},
         "", MAX_CHARS).via("a content integer too long for int()")
def test_normalisation_raises_only_malformed_event(payload: dict[str, Any], bot: str,
                                                   max_chars: int) -> None:
    try:
        message = parse_message(payload, bot_open_id=bot, max_text_chars=max_chars)
    except MalformedEvent as error:
        assert str(error), "a reason for the one log line"
    else:
        check_storable(message)
        assert len(message.text) <= max_chars + len(" …[truncated]")
    arrival = arrival_of(payload)
    assert all(isinstance(v, str) for v in (arrival.chat_id, arrival.chat_type,
                                             arrival.sender_open_id, arrival.sender_type))
    assert all(isinstance(v, str) for v in arrival.mentioned_open_ids)


@FAST
@given(contents())
def test_every_message_type_renders_or_is_malformed(typed: tuple[Any, Any]) -> None:
    message_type, content = typed
    try:
        text = message_text(str(message_type), content)
    except MalformedEvent:
        assert message_type in ("text", "post"), "every other type is a placeholder"
    else:
        assert isinstance(text, str)
        if message_type not in ("text", "post"):
            assert text, "a placeholder is never empty"


# Each bug the properties above found, pinned on its shrunk input (each raised something
# other than MalformedEvent before its fix), with what it reads as now (None: MalformedEvent).
BROKEN: list[tuple[str, str, Any, str | None]] = [
    ("deeply nested content", "text", "[" * 100_000, None),
    ("content integer beyond int()'s digit limit", "text", "1" * 5000, None),
    ("post whose content is not a list", "post", json.dumps({"content": 5}), ""),
    ("card whose header is not an object", "interactive", json.dumps({"header": "x"}),
     "[card]"),
    ("audio of infinite duration", "audio", '{"duration": Infinity, "file_key": "k"}',
     "[audio]"),
    ("todo whose summary content is not a list", "todo",
     json.dumps({"summary": {"content": 3}}), "[todo]"),
]


@pytest.mark.parametrize("case, message_type, content, text", BROKEN,
                         ids=[c for c, *_ in BROKEN])
def test_pinned_contents(case: str, message_type: str, content: Any, text: str | None) -> None:
    if text is None:
        with pytest.raises(MalformedEvent, match="not JSON"):
            message_text(message_type, content)
    else:
        assert message_text(message_type, content) == text


def _message(**fields: Any) -> dict[str, Any]:
    body = {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "p2p",
            "message_type": "text", "content": json.dumps({"text": "hi"}), **fields}
    return {"event": {"sender": {"sender_id": {"open_id": "ou_u"}, "sender_type": "user"},
                      "message": body}}


PINNED: list[tuple[str, dict[str, Any], str | None]] = [
    ("mentions that are not a list", _message(mentions=5), "hi"),
    ("an infinite create_time", _message(create_time=float("inf")), "hi"),
    ("a lone surrogate in the text", _message(content='{"text": "a\\ud800"}'), "a\ufffd"),
    ("a lone surrogate in the chat id", _message(chat_id="oc_\udc00"), None),
    ("a message id with the inbox's separator", _message(message_id="om_a|b"), None),
    ("a message id that is not a string", _message(message_id={"a": "|"}), None),
    ("a line break in the chat id (a forged log line)", _message(chat_id="oc_a\nINFO x"),
     None),
    ("a bidi override in the message id", _message(message_id="om_\u202e1"), None),
]


@pytest.mark.parametrize("chat_id", ["oc_\udc00", "oc_a\nINFO forged", "oc_\u202e", "oc_|"])
@pytest.mark.parametrize("kind", sorted(CHANGES))
def test_a_chat_event_whose_chat_id_no_state_can_hold_is_malformed(kind: str,
                                                                   chat_id: str) -> None:
    event = {"schema": "2.0", "header": {"event_id": "ev_1", "event_type": kind},
             "event": {"chat_id": chat_id, "message_id": "om_1",
                       "operator_id": {"open_id": "ou_\udc00"}}}
    with pytest.raises(MalformedEvent, match="usable event.chat_id"):
        parse_chat_event(event)


@pytest.mark.parametrize("case, payload, text", PINNED, ids=[c for c, *_ in PINNED])
def test_pinned_payloads(case: str, payload: dict[str, Any], text: str | None) -> None:
    assert arrival_of(payload).mentioned_open_ids == ()
    if text is None:
        with pytest.raises(MalformedEvent, match="unusable message"):
            parse_message(payload)
        return
    message = parse_message(payload)
    check_storable(message)
    assert message.text == text and message.create_time_ms == 0


# --- admission --------------------------------------------------------------------------

people = st.one_of(st.sampled_from(["", BOT, "ou_admin", "ou_ann", "ou_x"]), hostile_str)
chat_ids = st.one_of(st.sampled_from(["", CHAT, "oc_rule"]), hostile_str)
arrivals = st.builds(Arrival, chat_id=chat_ids,
                     chat_type=st.one_of(st.sampled_from(["p2p", "group", ""]), hostile_str),
                     sender_open_id=people,
                     sender_type=st.one_of(st.sampled_from(["user", "app", ""]), hostile_str),
                     mentioned_open_ids=st.lists(people, max_size=3).map(tuple),
                     mentions_all=st.booleans())
group_rules = st.builds(GroupRule, policy=st.none() | st.sampled_from(GROUP_POLICIES),
                        require_mention=st.none() | st.booleans(),
                        allowed=st.none() | st.frozensets(people, max_size=3))
rule_sets = st.builds(Rules, dm_policy=st.sampled_from(DM_POLICIES),
                      group_policy=st.sampled_from(GROUP_POLICIES),
                      allowed=st.frozensets(people, max_size=3),
                      admins=st.frozensets(people, max_size=3),
                      require_mention=st.booleans(), mention_all=st.booleans(),
                      allow_bots=st.booleans(),
                      groups=st.dictionaries(chat_ids, group_rules, max_size=3))


@FAST
@given(st.one_of(arrivals, payloads().map(arrival_of)), rule_sets,
       st.sampled_from(["", BOT]) | hostile_str)
def test_admission_is_total(arrival: Arrival, rules: Rules, bot: str) -> None:
    verdict = admit(arrival, rules, bot)
    assert isinstance(verdict.admitted, bool)
    if verdict.admitted:
        assert not verdict.tell
    else:
        assert isinstance(verdict.reason, str) and verdict.reason, "a reason for the log line"
    if arrival.sender_type != "user" and (not bot or arrival.sender_open_id == bot):
        assert not verdict.admitted, "never the bot's own messages: no loops"


# --- the ingest step --------------------------------------------------------------------


@pytest.fixture
def client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    """A Redis of this module's own, so each example may start from an empty one."""
    yield from client_of(private_redis)


class NoBroker:
    def send_task(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("the outbox is never started here")


def expected_outcome(frame: bytes, seen: set[tuple[str, str]]) -> tuple[str, Any]:
    """What on_frame should do with a frame (and the detail its log line names), from the
    pure steps alone."""
    try:
        event = json.loads(frame)
    except (ValueError, RecursionError):
        return "dropped", "not JSON"
    header = event.get("header") if isinstance(event, dict) else None
    kind = header.get("event_type") if isinstance(header, dict) else None
    if not isinstance(event, dict) or not isinstance(kind, str):
        return "dropped", ""
    if kind in CHANGES:  # (the bot added, with no welcome set: said, nothing stored)
        try:
            return "changed", parse_chat_event(event)
        except MalformedEvent as error:
            return "malformed", str(error)
    if kind != MESSAGE_EVENT:
        return "ignored", kind
    verdict = admit(arrival_of(event), RULES, BOT)
    if not verdict.admitted:
        return "refused", verdict.reason
    try:
        message = parse_message(event, bot_open_id=BOT, max_text_chars=MAX_CHARS)
    except MalformedEvent as error:
        return "malformed", str(error)
    key = (message.chat_id, message.message_id)
    if key in seen:
        return "duplicate", message
    seen.add(key)
    return ("command" if parse_command(message.text) else "stored"), message


@st.composite
def sessions(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, Any]]]:
    """Valid messages for CHAT (their texts) and the frames to send, in order: each valid
    one (some delivered twice), interleaved with hostile frames."""
    texts = draw(st.lists(valid_texts, min_size=1, max_size=5))
    steps: list[tuple[str, Any]] = [("valid", i) for i in range(len(texts))]
    steps += [("bad", frame) for frame in draw(st.lists(raw_frames, max_size=8))]
    steps += [("valid", i) for i in draw(st.lists(st.integers(0, len(texts) - 1), max_size=2))]
    return texts, draw(st.permutations(steps))


def _frame(message_id: str, **message: Any) -> bytes:
    event = valid_event(message_id, "x", 1_700_000_000_000)
    event["event"]["message"].update(message)
    return json.dumps(event).encode()


PINNED_FRAMES = [  # each raised out of on_frame before its fix
    ("bad", b"[" * 5000 + b"]" * 5000),  # RecursionError out of decode_event
    # UnicodeEncodeError on its way to Redis
    ("bad", _frame("om_s", content=json.dumps({"text": "@_user_1 \ud800"}))),
    ("bad", _frame("om_a|b")),  # stored under the wrong id, unreadable
    ("bad", _frame("om_m", mentions=5)),  # TypeError in arrival_of
    # no line at all: a card click where no card handler is set
    ("bad", json.dumps({**valid_event("om_c", "x", 1_700_000_000_000),
                        "header": {"event_type": CARD_EVENT}}).encode()),
    # a lone surrogate in the refusal's line (no UTF-8 log file can hold it)
    ("bad", json.dumps(json.loads(_frame("om_b")) | {"event": {
        "sender": {"sender_type": "x\udfffy", "sender_id": {"open_id": "ou_x\n"}},
        "message": {"chat_id": "oc_\u202e", "message_id": "om_b"}}}).encode()),
]


@SLOW
@given(sessions())
@example((["hello"], [("valid", 0), *PINNED_FRAMES, ("valid", 0)]))
def test_ingest_keeps_every_valid_message_and_says_why_it_drops_the_rest(
        client: redis.Redis, caplog: pytest.LogCaptureFixture,
        session: tuple[list[str], list[tuple[str, Any]]]) -> None:
    texts, steps = session
    client.flushdb()
    caplog.set_level(logging.DEBUG, logger="gateway")
    store = ChatStore(client, StoreConfig(inbox_cap=10_000))
    take = Intake(store, Publisher(NoBroker()), Outbox(),  # type: ignore[arg-type]
                  max_text_chars=MAX_CHARS, primary_app_id=APP, rules=RULES)
    take.bot_open_ids[APP] = BOT
    seen: set[tuple[str, str]] = set()
    stored: list[Message] = []
    commands = 0
    for step, value in steps:
        frame = json.dumps(valid_event(f"om_valid_{value}", texts[value], 1_700_000_000_000
                                       + value)).encode() if step == "valid" else value
        outcome, detail = expected_outcome(frame, seen)
        before = len(caplog.records)
        assert take.on_frame(APP, "event", frame) is None
        lines = [r for r in caplog.records[before:] if r.name.startswith("gateway")]
        assert len(lines) == 1, f"{outcome}: one line, not {[r.getMessage() for r in lines]}"
        [line] = lines
        said = line.getMessage()
        warned = line.levelno >= logging.WARNING
        assert warned == (outcome in ("dropped", "malformed")), (outcome, said)
        if outcome == "dropped":
            assert said.startswith("event frame dropped") and detail in said
        elif outcome == "malformed":
            assert said.endswith(f"dropped: {detail}")
        elif outcome == "refused":
            assert said.endswith(f"refused: {shown(detail, max_chars=200)}")
            said.encode()  # fit for any log file: nothing unprintable from the event
        elif outcome == "ignored":
            assert "not handled" in said
        elif outcome == "changed":
            assert f"bot added to group {detail.chat_id}" in said
        elif outcome == "command":
            commands += 1
            assert said.startswith("command /")
        elif outcome == "duplicate":
            assert ": duplicate (" in said
        else:
            assert ": claimed (" in said or ": queued (" in said
            stored.append(detail)
        if step == "valid":
            assert outcome in ("stored", "duplicate"), (outcome, detail)

    waiting = {m.message_id: m for _, m in store.pending(CHAT) if m is not None}
    for i, text in enumerate(texts):
        message = waiting.get(f"om_valid_{i}")
        assert message is not None and message.text == text.strip(), f"valid message {i}"
    by_chat: dict[str, Counter[str]] = {}
    for message in stored:
        by_chat.setdefault(message.chat_id, Counter())[message.message_id] += 1
    for chat, expected in by_chat.items():
        entries = store.pending(chat)
        assert all(m is not None for _, m in entries), "every stored entry reads back"
        assert Counter(i for i, _ in entries) == expected, f"chat {chat!r}: exactly once"
        assert {m for _, m in entries} == {m for m in stored if m.chat_id == chat}
    inboxes = [k for k in client.scan_iter(count=1000)
               if k != INDEX_KEY and str(k).endswith(":inbox") and client.type(k) == "zset"]
    assert sum(int(client.zcard(k)) for k in inboxes) == len(stored), "nothing else stored"
    control: list[tuple[str, dict[str, str]]] = client.xrange(CONTROL_KEY)  # type: ignore[assignment]
    assert sum(f.get("kind") == "command" for _, f in control) == commands
