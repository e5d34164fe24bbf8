"""A client that drops its connection mid-request (a dying worker's, a killed listener's) is
a normal event for the simulator, as for any server: one short line, never a traceback."""

from __future__ import annotations

import logging
import socket
import struct

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator


def test_a_request_dropped_mid_body_is_one_short_line(simulator: Simulator,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    host, port = simulator.url.removeprefix("http://").split(":")
    with caplog.at_level(logging.INFO, logger="gateway.simulator"):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(b"POST /callback/ws/endpoint HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 1000\r\n\r\n{\"AppID\"")
        wait_until(lambda: simulator.state.requests_count("/callback/ws/endpoint") >= 1, 5,
                   "the request to reach its handler")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        sock.close()
        wait_until(lambda: any("the client went away" in r.getMessage()
                               for r in caplog.records), 5, "the line about it")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
