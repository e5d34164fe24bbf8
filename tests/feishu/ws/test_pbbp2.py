"""The hand-written pbbp2 codec against the SDK's own protobuf (lark-oapi's `pbbp2_pb2`, the
code Feishu's frames are defined by): the same bytes out, the same fields in, and malformed
input refused with a ValueError, never misread."""

from __future__ import annotations

import random

import pytest
from lark_oapi.ws.pb.google.protobuf.message import Error as ProtobufError
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from gateway.feishu.ws import pbbp2
from gateway.feishu.ws.frames import encode_frame, parse_frame

TEXTS = ["", "event", "ping", "message_id", "ä中文🙂", "x" * 300]


def random_fields(rng: random.Random) -> dict[str, object]:
    return {"seq_id": rng.choice([0, 1, 2**63, 2**64 - 1, rng.getrandbits(40)]),
            "log_id": rng.choice([0, 127, 128, rng.getrandbits(64)]),
            "service": rng.choice([0, 1, -1, 2**31 - 1, -(2**31), rng.randint(0, 5000)]),
            "method": rng.choice([0, 1, -7]),
            "headers": [(rng.choice(TEXTS), rng.choice(TEXTS)) for _ in range(rng.randint(0, 5))],
            "payload_encoding": rng.choice(TEXTS), "payload_type": rng.choice(TEXTS),
            "payload": rng.choice([None, b"", bytes(rng.getrandbits(8) for _ in range(200))]),
            "log_id_new": rng.choice(TEXTS)}


def sdk_encode(f: dict[str, object]) -> bytes:
    frame = Frame()
    frame.SeqID, frame.LogID = f["seq_id"], f["log_id"]
    frame.service, frame.method = f["service"], f["method"]
    for key, value in f["headers"]:  # type: ignore[attr-defined]
        header = frame.headers.add()
        header.key, header.value = key, value
    for name, attr in (("payload_encoding", "payload_encoding"),
                       ("payload_type", "payload_type"), ("log_id_new", "LogIDNew")):
        if f[name]:
            setattr(frame, attr, f[name])
    if f["payload"] is not None:
        frame.payload = f["payload"]
    return bytes(frame.SerializeToString())


def test_frames_are_written_byte_for_byte_as_the_sdk_writes_them() -> None:
    rng = random.Random(7)
    for _ in range(500):
        f = random_fields(rng)
        assert pbbp2.encode(**f) == sdk_encode(f)  # type: ignore[arg-type]


def test_frames_the_sdk_writes_are_read_field_for_field() -> None:
    rng = random.Random(11)
    for _ in range(500):
        f = random_fields(rng)
        parsed = parse_frame(sdk_encode(f))
        assert (parsed.seq_id, parsed.log_id, parsed.service, parsed.method) == (
            f["seq_id"], f["log_id"], f["service"], f["method"])
        first: dict[str, str] = {}
        for key, value in f["headers"]:  # type: ignore[attr-defined]
            first.setdefault(key, value)  # (a key sent twice: its first value, as the SDK)
        assert parsed.headers == first
        assert parsed.payload == (f["payload"] or b"")
        assert (parsed.payload_encoding, parsed.payload_type, parsed.log_id_new) == (
            f["payload_encoding"], f["payload_type"], f["log_id_new"])


def test_unknown_fields_are_skipped_and_a_repeated_scalar_keeps_its_last_value() -> None:
    data = encode_frame(method=1, service=2, headers={"type": "event"}, payload=b"{}")
    extra = b"\x08\x05" + b"\x58\x01" + b"\x62\x02hi" + b"\x6d\x00\x00\x00\x00"  # 1, 11, 12, 13
    ours, sdk = parse_frame(data + extra), Frame()
    sdk.ParseFromString(data + extra)
    assert ours.seq_id == sdk.SeqID == 5 and ours.payload == b"{}"
    assert ours.headers == {"type": "event"}


def test_malformed_frames_are_refused_as_the_sdk_refuses_them() -> None:
    rng = random.Random(3)
    whole = encode_frame(method=1, service=2, headers={"type": "event", "sum": "1"},
                         payload=b'{"a": 1}', seq_id=9, log_id_new="x")
    samples = [whole[:n] for n in range(len(whole))]  # every truncation
    samples += [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    samples += [b"\x08\x01\x10\x01\x18\x01", b"\x2a\x02\x0a\x00" + whole]  # no method; a key alone
    for data in samples:
        sdk = Frame()
        try:
            sdk.ParseFromString(data)
            sdk_ok = sdk.IsInitialized() and all(h.IsInitialized() for h in sdk.headers)
        except (ProtobufError, UnicodeDecodeError, ValueError):
            sdk_ok = False
        try:
            parse_frame(data)
            ours_ok = True
        except ValueError:
            ours_ok = False
        if sdk_ok and not ours_ok:  # (groups, which Feishu never sends, we refuse)
            assert any(b & 7 in (3, 4) for b in data), data
        if ours_ok:
            assert sdk_ok, f"read a frame the SDK refuses: {data!r}"


@pytest.mark.parametrize("data", [b"\x08" + b"\xff" * 11, b"\x00\x00", b"\x0a\xff\xff\xff\x7f"])
def test_odd_bytes_are_one_clear_error(data: bytes) -> None:
    with pytest.raises(ValueError, match="not a pbbp2 frame"):
        parse_frame(data)


def overlong(tag: int, extra: int) -> bytes:
    """`tag` as a varint padded with `extra` continuation bytes (the same value, more bytes)."""
    out = bytearray()
    while tag > 0x7F:
        out.append(tag & 0x7F | 0x80)
        tag >>= 7
    out.append(tag | (0x80 if extra else 0))
    out += b"\x80" * (extra - 1) + b"\x00" if extra else b""
    return bytes(out)


def sdk_reads(data: bytes) -> Frame | None:
    """The frame as the SDK reads it (its required fields set), or None when it refuses it."""
    sdk = Frame()
    try:
        sdk.ParseFromString(data)
    except (ProtobufError, UnicodeDecodeError, ValueError):
        return None
    return sdk if sdk.IsInitialized() and all(h.IsInitialized() for h in sdk.headers) else None


def test_a_field_whose_tag_takes_more_bytes_than_it_needs_is_read_as_the_sdk_reads_it() -> None:
    """The SDK's protobuf finds a field by its tag's bytes: a tag padded with continuation
    bytes is an unknown field to it, skipped. Ours never reads such a field as the known
    one (a `type` header saying `pong` where the SDK reads `event`): it reads the frame as
    the SDK does, or refuses it."""
    rng = random.Random(5)
    base = encode_frame(method=1, service=2, headers={"type": "event"}, payload=b"{}", seq_id=4)
    header = b"\x0a\x04type\x12\x04pong"
    cases = [
        base + overlong(5 << 3 | 2, 1) + bytes([len(header)]) + header,  # a whole header
        base + b"\x2a" + bytes([len(header) + 1]) + overlong(1 << 3 | 2, 1) + header[1:],
        base + overlong(1 << 3, 1) + b"\x09",  # SeqID
        base + overlong(8 << 3 | 2, 2) + b"\x03abc",  # payload
        base + overlong(4 << 3, 3) + b"\x00",  # method: control
    ]
    for _ in range(300):
        number = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9])
        wire = 2 if number >= 5 else 0
        value = b"\x02\x0a\x00" if number == 5 else b"\x01x" if wire == 2 else b"\x07"
        cases.append(base + overlong(number << 3 | wire, rng.randint(1, 4)) + value)
    for data in cases:
        sdk = sdk_reads(data)
        try:
            ours = parse_frame(data)
        except ValueError:
            continue  # refused: never misread
        assert sdk is not None, f"read a frame the SDK refuses: {data!r}"
        assert (ours.seq_id, ours.method, ours.payload) == (sdk.SeqID, sdk.method, sdk.payload)
        assert ours.frame_type == next(h.value for h in sdk.headers if h.key == "type")


def test_a_header_sent_twice_counts_as_the_sdk_counts_it_its_first_value() -> None:
    data = encode_frame(method=1, service=2, headers={"type": "event"}, payload=b"{}")
    data += b"\x2a\x0c\x0a\x04type\x12\x04pong"
    sdk = sdk_reads(data)
    assert sdk is not None
    assert parse_frame(data).frame_type == "event" == next(
        h.value for h in sdk.headers if h.key == "type")
