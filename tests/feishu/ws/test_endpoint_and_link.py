"""The long connection's parts: endpoint answers, reconnect delays, parts (also through a
Link on a real websocket), ACKs."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import tracemalloc

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from gateway.core.errors import RetryableError
from gateway.feishu.ws import frames as f
from gateway.feishu.ws.endpoint import EndpointRefused, ServerConfig, backoff_s, parse_endpoint
from gateway.feishu.ws.link import PARTS_KEPT_S, Link, Parts

URL = "ws://127.0.0.1:1/ws/v2?device_id=d1&service_id=42"


def answer(code: int = 0, **data: object) -> str:
    return json.dumps({"code": code, "msg": "m", "data": data})


def test_endpoint_answer_gives_url_service_and_merged_config() -> None:
    got = parse_endpoint(200, answer(URL=URL, ClientConfig={
        "PingInterval": 90, "ReconnectCount": -1, "ReconnectInterval": 5,
        "ReconnectNonce": "bad"}), ServerConfig())
    assert (got.url, got.service_id) == (URL, 42)
    assert got.config == ServerConfig(ping_interval_s=90, reconnect_count=-1,
                                      reconnect_interval_s=5, reconnect_nonce_s=30)


@pytest.mark.parametrize(("status", "text"), [
    (503, answer(1)), (200, answer(1)), (200, answer(1000040343)), (502, "<html>bad</html>"),
    (200, answer(0)), (200, answer(0, URL="ws://h/ws/v2?device_id=d")),
])
def test_busy_broken_or_incomplete_answers_are_retried(status: int, text: str) -> None:
    with pytest.raises(RetryableError):
        parse_endpoint(status, text, ServerConfig())


def test_other_codes_are_final() -> None:
    with pytest.raises(EndpointRefused, match="code 1000040350"):
        parse_endpoint(200, answer(1000040350), ServerConfig())


def test_backoff_doubles_from_one_second_with_jitter_up_to_the_cap() -> None:
    rng = random.Random(7)
    server = ServerConfig(reconnect_interval_s=120, reconnect_nonce_s=0)
    for attempt in range(12):
        delay = backoff_s(attempt, server, rng)
        ceiling = min(60.0, 2.0 ** attempt)
        assert ceiling / 2 <= delay <= ceiling
    # the server's smaller ReconnectInterval caps it; its nonce spreads the first attempt
    small = ServerConfig(reconnect_interval_s=2, reconnect_nonce_s=10)
    assert all(backoff_s(9, small, rng) <= 2 for _ in range(50))
    firsts = [backoff_s(0, small, rng) for _ in range(200)]
    assert max(firsts) > 5 and min(firsts) >= 0.5


def test_parts_are_joined_in_order_whatever_the_arrival_order() -> None:
    now = [0.0]
    parts = Parts(clock=lambda: now[0])
    assert parts.add("m", 3, 2, b"c") is None
    assert parts.add("m", 3, 0, b"a") is None
    assert parts.add("m", 3, 1, b"b") == b"abc"
    assert len(parts) == 0
    assert parts.add("single", 1, 0, b"x") == b"x"


def test_incomplete_parts_are_dropped_after_a_while_and_bad_ones_refused() -> None:
    now = [0.0]
    parts = Parts(clock=lambda: now[0])
    assert parts.add("m", 2, 0, b"a") is None
    now[0] = PARTS_KEPT_S + 1
    assert parts.add("n", 2, 0, b"x") is None
    assert len(parts) == 1, "the stale part of m is gone"
    assert parts.add("m", 2, 1, b"b") is None, "m starts again: its first part was dropped"
    with pytest.raises(ValueError):
        parts.add("k", 2, 5, b"z")


def data_frame(frame_id: str, total: int, index: int, chunk: bytes) -> bytes:
    headers = {f.HEADER_TYPE: "event", f.HEADER_MESSAGE_ID: frame_id,
               f.HEADER_SUM: str(total), f.HEADER_SEQ: str(index)}
    return f.encode_frame(method=f.METHOD_DATA, service=9, headers=headers, payload=chunk)


def test_a_payload_of_too_many_parts_is_refused_before_any_memory_is_taken() -> None:
    parts = Parts()
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=f"1000000000 parts, more than {f.PARTS_MAX}"):
            parts.add("m", 10**9, 0, b"a")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 and len(parts) == 0
    with pytest.raises(ValueError, match="part 2 of 2"):
        parts.add("m", 2, 2, b"a")
    with pytest.raises(ValueError):
        f.split_payload(b"x" * 4096, f.PARTS_MAX + 1)
    payload = bytes(range(256)) * 8
    raw = f.build_data_frames(payload, frame_message_id="big", trace_id="t", service=9,
                              seq_id=1, log_id=2, parts=f.PARTS_MAX)
    joined = [parts.add("big", int(x.headers[f.HEADER_SUM]), int(x.headers[f.HEADER_SEQ]),
                        x.payload) for x in map(f.parse_frame, reversed(raw))]
    assert joined[:-1] == [None] * (f.PARTS_MAX - 1) and joined[-1] == payload


async def frames_through_a_link(sent: list[bytes], wanted: int) -> list[f.ParsedFrame]:
    """The data frames a Link on a real websocket hands on of `sent`, once `wanted` came.
    They are sent once the Link's first ping is answered and its ping loop sleeps."""
    got: list[f.ParsedFrame] = []
    stop = asyncio.Event()

    async def feishu(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.send(f.build_pong(9, None))
        await asyncio.sleep(0.2)
        for message in sent:
            await ws.send(message)
        await ws.wait_closed()

    async def on_frame(ws: ClientConnection, frame: f.ParsedFrame) -> None:
        if frame.method == f.METHOD_DATA:
            got.append(frame)
        if len(got) == wanted:
            stop.set()

    async with serve(feishu, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as ws:
            link = Link(ws, 9, on_frame, ping_interval_s=30, ping_timeout_s=10)
            await asyncio.wait_for(link.serve(stop), 10)
    return got


def test_a_frame_of_too_many_parts_is_dropped_with_a_warning_and_the_link_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    sent = [data_frame("fm_huge", 10**9, 0, b"x"), data_frame("fm_past", 2, 5, b"x"),
            data_frame("fm_ok", 2, 1, b"lo"), data_frame("fm_ok", 2, 0, b"hel")]
    with caplog.at_level(logging.WARNING, logger="gateway.feishu.ws.link"):
        got = asyncio.run(frames_through_a_link(sent, 1))
    assert [(x.headers[f.HEADER_MESSAGE_ID], x.payload) for x in got] == [("fm_ok", b"hello")]
    assert [r.getMessage() for r in caplog.records] == [
        f"data frame fm_huge dropped: 1000000000 parts, more than {f.PARTS_MAX}",
        "data frame fm_past dropped: part 5 of 2"]


def test_ack_is_the_same_frame_with_biz_rt_and_the_answer_in_base64_json() -> None:
    raw = f.build_data_frames(b"{}", frame_message_id="fm", trace_id="t", service=9,
                              seq_id=5, log_id=6)[0]
    frame = f.parse_frame(raw)
    ack = f.parse_frame(f.build_ack(frame, code=200, data={"toast": {"content": "ok"}},
                                    biz_rt_ms=3))
    assert (ack.seq_id, ack.log_id, ack.service, ack.method) == (5, 6, 9, f.METHOD_DATA)
    assert ack.headers == {**frame.headers, f.HEADER_BIZ_RT: "3"}
    body = json.loads(ack.payload)
    assert body["code"] == 200
    assert json.loads(base64.b64decode(body["data"])) == {"toast": {"content": "ok"}}
    plain = json.loads(f.parse_frame(f.build_ack(frame, code=500, data=None,
                                                 biz_rt_ms=0)).payload)
    assert plain == {"code": 500}
    assert f.parse_frame(f.build_ping(9)).headers == {f.HEADER_TYPE: "ping"}
