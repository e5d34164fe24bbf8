"""The long connection's wire format: pbbp2 frames (lark-oapi's protobuf schema, coded in
pbbp2.py), built and parsed by pure functions shared by our client and the simulator."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.feishu.ws import pbbp2

METHOD_CONTROL = 0
METHOD_DATA = 1

HEADER_TYPE = "type"
HEADER_MESSAGE_ID = "message_id"
HEADER_SUM = "sum"
HEADER_SEQ = "seq"
HEADER_TRACE_ID = "trace_id"
HEADER_BIZ_RT = "biz_rt"

PARTS_MAX = 1024
"""The most parts (the `sum` header) one payload may come in. Feishu's largest event, a
message with its content at the 150 KB limit, is far below 1 MiB, which this carries even
cut into 1 KiB parts; a receiver sizes its list of parts by `sum`, so a bigger one is a
malformed frame, not an event."""


@dataclass(frozen=True)
class ParsedFrame:
    """A decoded frame: the numeric fields, headers as a dict, and the raw payload."""

    seq_id: int
    log_id: int
    service: int
    method: int
    headers: dict[str, str] = field(default_factory=dict)
    payload: bytes = b""
    payload_encoding: str = ""
    payload_type: str = ""
    log_id_new: str = ""

    @property
    def frame_type(self) -> str:
        """The `type` header ("ping", "pong", "event", ...), or "" when absent."""
        return self.headers.get(HEADER_TYPE, "")


@dataclass(frozen=True)
class AckPayload:
    """The JSON payload of a data-frame ACK sent back by the SDK."""

    code: int
    data: dict[str, Any] | None


def encode_frame(
    *,
    method: int,
    service: int,
    headers: Mapping[str, str],
    payload: bytes | None = None,
    seq_id: int = 0,
    log_id: int = 0,
    payload_encoding: str = "",
    payload_type: str = "",
    log_id_new: str = "",
) -> bytes:
    """Serialize one frame; headers keep their insertion order."""
    return pbbp2.encode(seq_id=seq_id, log_id=log_id, service=service, method=method,
                        headers=headers.items(), payload_encoding=payload_encoding,
                        payload_type=payload_type, payload=payload, log_id_new=log_id_new)


def parse_frame(data: bytes) -> ParsedFrame:
    """Decode a binary websocket message; raises ValueError when it is not a Frame."""
    try:
        fields = pbbp2.decode(data)
    except ValueError as exc:
        raise ValueError(f"not a pbbp2 frame: {exc}") from exc
    headers = fields.pop("headers")
    assert isinstance(headers, list)
    return ParsedFrame(headers=dict(headers), **fields)  # type: ignore[arg-type]


def split_payload(payload: bytes, parts: int) -> list[bytes]:
    """Split bytes into `parts` non-empty chunks (the SDK treats an empty chunk as missing),
    at most PARTS_MAX."""
    if not 1 <= parts <= PARTS_MAX:
        raise ValueError(f"parts must be 1 to {PARTS_MAX}")
    if parts > max(len(payload), 1):
        raise ValueError(f"cannot split {len(payload)} bytes into {parts} non-empty parts")
    size, extra = divmod(len(payload), parts)
    chunks: list[bytes] = []
    start = 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        chunks.append(payload[start:end])
        start = end
    return chunks


def build_data_frames(
    payload: bytes,
    *,
    frame_message_id: str,
    trace_id: str,
    service: int,
    seq_id: int,
    log_id: int,
    frame_type: str = "event",
    parts: int = 1,
) -> list[bytes]:
    """Build the data frame(s) carrying one event, split into `parts` frames."""
    frames: list[bytes] = []
    for seq, chunk in enumerate(split_payload(payload, parts)):
        headers = {
            HEADER_TYPE: frame_type,
            HEADER_MESSAGE_ID: frame_message_id,
            HEADER_SUM: str(parts),
            HEADER_SEQ: str(seq),
            HEADER_TRACE_ID: trace_id,
        }
        frames.append(
            encode_frame(
                method=METHOD_DATA,
                service=service,
                headers=headers,
                payload=chunk,
                seq_id=seq_id,
                log_id=log_id,
            )
        )
    return frames


def build_pong(service: int, client_config: Mapping[str, int] | None) -> bytes:
    """A pong control frame, optionally carrying a JSON ClientConfig the SDK applies."""
    payload = None if client_config is None else json.dumps(dict(client_config)).encode()
    return encode_frame(
        method=METHOD_CONTROL, service=service, headers={HEADER_TYPE: "pong"}, payload=payload
    )


def parse_ack_payload(payload: bytes) -> AckPayload:
    """Decode `{"code":200,"data":"<base64 JSON>"}`; undecodable data is kept as raw text."""
    try:
        body = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"ACK payload is not JSON: {payload[:80]!r}") from exc
    if not isinstance(body, dict):
        raise ValueError(f"ACK payload is not a JSON object: {body!r}")
    code = int(body.get("code", 0))
    raw = body.get("data")
    if raw is None or raw == "":
        return AckPayload(code=code, data=None)
    try:
        decoded = json.loads(base64.b64decode(str(raw), validate=True).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError):
        return AckPayload(code=code, data={"raw": raw})
    data = decoded if isinstance(decoded, dict) else {"value": decoded}
    return AckPayload(code=code, data=data)


def build_ping(service: int) -> bytes:
    """The client's ping control frame."""
    return encode_frame(method=METHOD_CONTROL, service=service, headers={HEADER_TYPE: "ping"})


def build_ack(frame: ParsedFrame, *, code: int, data: Mapping[str, Any] | None,
              biz_rt_ms: int) -> bytes:
    """The ACK of a data frame: the same frame back (every field Feishu sent, as the SDK
    does) with a `biz_rt` header and the answer `{"code": 200}`, plus `"data"` (base64
    JSON) for a callback's answer."""
    body: dict[str, Any] = {"code": code}
    if data is not None:
        raw = json.dumps(dict(data), ensure_ascii=False, separators=(",", ":")).encode()
        body["data"] = base64.b64encode(raw).decode("ascii")
    headers = {key: value for key, value in frame.headers.items() if key != HEADER_BIZ_RT}
    headers[HEADER_BIZ_RT] = str(biz_rt_ms)
    return encode_frame(method=frame.method, service=frame.service, headers=headers,
                        payload=json.dumps(body, separators=(",", ":")).encode(),
                        seq_id=frame.seq_id, log_id=frame.log_id,
                        payload_encoding=frame.payload_encoding,
                        payload_type=frame.payload_type, log_id_new=frame.log_id_new)


def parse_json(payload: bytes) -> Any:
    """A frame payload's JSON value, or None when it is not JSON."""
    try:
        return json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
