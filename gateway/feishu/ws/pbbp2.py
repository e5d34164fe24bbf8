"""The long connection's frame, `pbbp2.Frame` (lark-oapi's `pbbp2.proto`, protobuf 2),
encoded and decoded by hand: the SDK's pure-Python protobuf spent a third of the listener's
CPU on it. Byte for byte what the SDK writes (fields in number order, each field that was
set), and it reads what the SDK reads: unknown fields skipped (so is a field whose tag takes
more bytes than it needs: the SDK finds a field by its tag's bytes), a repeated scalar's last
value kept, a header sent twice its first value (the SDK's `_get_by_key`); tests/feishu
hold it to the SDK's own codec.

    message Header { required string key = 1; required string value = 2; }
    message Frame {
      required uint64 SeqID = 1;  required uint64 LogID = 2;
      required int32 service = 3;  required int32 method = 4;
      repeated Header headers = 5;
      optional string payload_encoding = 6;  optional string payload_type = 7;
      optional bytes payload = 8;  optional string LogIDNew = 9;
    }
"""

from __future__ import annotations

from collections.abc import Iterable

_U64 = (1 << 64) - 1
_VARINT, _FIXED64, _DELIMITED, _FIXED32 = 0, 1, 2, 5


def _varint(value: int) -> bytes:
    value &= _U64  # (a negative int32 takes ten bytes, as protobuf writes it)
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _delimited(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | _DELIMITED) + _varint(len(data)) + data


def encode(*, seq_id: int, log_id: int, service: int, method: int,
           headers: Iterable[tuple[str, str]], payload_encoding: str = "",
           payload_type: str = "", payload: bytes | None = None, log_id_new: str = "") -> bytes:
    """One frame (the optional strings written when not empty, the payload when given)."""
    parts = [b"\x08", _varint(seq_id), b"\x10", _varint(log_id), b"\x18", _varint(service),
             b"\x20", _varint(method)]
    for key, value in headers:
        parts.append(_delimited(5, _delimited(1, key.encode()) + _delimited(2, value.encode())))
    for number, text in ((6, payload_encoding), (7, payload_type)):
        if text:
            parts.append(_delimited(number, text.encode()))
    if payload is not None:
        parts.append(_delimited(8, payload))
    if log_id_new:
        parts.append(_delimited(9, log_id_new.encode()))
    return b"".join(parts)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise ValueError("varint too long")


UNKNOWN = -1
"""The field number of a field none of ours can be: a tag of more than one byte."""


def _next(data: bytes, pos: int, end: int) -> tuple[int, int, int | bytes, int]:
    """The field at `pos`: (field number, wire type, value, where the next begins); a fixed
    width value is skipped (0). Every field of ours has a one-byte tag: a longer one (a
    bigger number, or one of ours padded with continuation bytes) is UNKNOWN, as the SDK's
    protobuf, which looks a field up by its tag's bytes, finds none."""
    if pos < end and data[pos] < 0x80:
        tag, pos = data[pos], pos + 1
        number = tag >> 3
    else:
        tag, pos = _read_varint(data, pos)
        number = UNKNOWN if tag >> 3 else 0
    wire = tag & 7
    if number == 0:
        raise ValueError("field number 0")
    if wire in (_VARINT, _DELIMITED):
        if pos < end and data[pos] < 0x80:
            value, pos = data[pos], pos + 1
        else:
            value, pos = _read_varint(data, pos)
        if wire == _VARINT:
            return number, wire, value, pos
        if pos + value > end:
            raise ValueError("truncated field")
        return number, wire, data[pos:pos + value], pos + value
    if wire in (_FIXED64, _FIXED32):
        pos += 8 if wire == _FIXED64 else 4
        if pos > end:
            raise ValueError("truncated field")
        return number, wire, 0, pos
    raise ValueError(f"unsupported wire type {wire}")


def _text(raw: int | bytes) -> str:
    assert isinstance(raw, bytes)
    try:
        return raw.decode()
    except UnicodeDecodeError as error:
        raise ValueError(f"a string field is not UTF-8: {error}") from None


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _header(data: bytes) -> tuple[str, str]:
    key = value = None
    pos, end = 0, len(data)
    while pos < end:
        number, wire, raw, pos = _next(data, pos, end)
        if wire == _DELIMITED:
            if number == 1:
                key = _text(raw)
            elif number == 2:
                value = _text(raw)
    if key is None or value is None:
        raise ValueError("a header lacks its key or value")
    return key, value


_SCALARS = {1: "seq_id", 2: "log_id", 3: "service", 4: "method"}
_TEXTS = {6: "payload_encoding", 7: "payload_type", 9: "log_id_new"}


def decode(data: bytes) -> dict[str, object]:
    """The frame's fields by their names in `ParsedFrame` (headers: a list of (key, value));
    ValueError when `data` is not a whole frame with its required fields."""
    out: dict[str, object] = {"payload_encoding": "", "payload_type": "", "payload": b"",
                              "log_id_new": ""}
    headers: list[tuple[str, str]] = []
    pos, end = 0, len(data)
    while pos < end:
        number, wire, value, pos = _next(data, pos, end)
        if wire == _VARINT:
            name = _SCALARS.get(number)
            if name is not None:
                assert isinstance(value, int)
                out[name] = _int32(value) if number >= 3 else value
        elif wire == _DELIMITED:
            assert isinstance(value, bytes)
            if number == 5:
                headers.append(_header(value))
            elif number == 8:
                out["payload"] = value
            elif number in _TEXTS:
                out[_TEXTS[number]] = _text(value)
    if len(out) != 8:
        raise ValueError("the frame lacks required fields")
    out["headers"] = _first_of_each(headers)
    return out


def _first_of_each(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each key with its first value, in order (a key sent twice counts as the SDK counts it)."""
    first: dict[str, str] = {}
    for key, value in headers:
        first.setdefault(key, value)
    return list(first.items())
