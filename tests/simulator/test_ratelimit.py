"""The simulator's per-app frequency limit over the sending calls, over real HTTP."""

from __future__ import annotations

import time

import pytest

from gateway.simulator import Simulator
from tests.support.openapi import Api, streaming_card

RATE_LIMITED = {"code": 99991400, "msg": "request trigger frequency limit"}


def test_sends_over_the_limit_get_429_with_feishu_headers(simulator: Simulator) -> None:
    simulator.add_app("cli_free", "free-secret")
    simulator.set_rate_limit(3)
    with Api(simulator) as api, Api(simulator, "cli_free", "free-secret") as free:
        answers = [api.send("oc_rl", "text", {"text": f"m{n}"}) for n in range(5)]
        assert 429 in [a.status_code for a in answers]
        assert simulator.max_send_rate(simulator.app_id) <= 3
        limited = next(a for a in answers if a.status_code == 429)
        assert limited.json() == RATE_LIMITED
        assert limited.headers["x-ogw-ratelimit-limit"] == "3"
        assert limited.headers["x-ogw-ratelimit-reset"] == "1"
        card = api.create_card(streaming_card())  # CardKit calls share the window
        assert card.status_code in (200, 429)
        simulator.set_rate_limit(None, app_id="cli_free")  # nothing set for it: no-op
        simulator.set_rate_limit(10, app_id="cli_free")  # its own limit wins
        assert {free.send("oc_rl2", "text", {"text": "x"}).status_code
                for _ in range(6)} == {200}

        deadline = time.monotonic() + 5  # the window slides: sends go through again
        while api.send("oc_rl", "text", {"text": "later"}).status_code != 200:
            assert time.monotonic() < deadline, "the limit never let a send through again"
            time.sleep(0.05)  # poll interval
        simulator.set_rate_limit(None)
        assert {api.send("oc_rl", "text", {"text": "off"}).status_code
                for _ in range(6)} == {200}

    primary = simulator.app_id
    assert simulator.rate_limited_count(primary) >= 2
    assert simulator.rate_limited_count("cli_free") == 0
    assert simulator.max_send_rate("cli_free") == 6
    accepted = len(simulator.sent_messages(app_id=primary)) + len(simulator.cards())
    assert sum(simulator.send_rate(primary)) == len(simulator.send_times(primary)) == accepted
    assert sum(simulator.send_rate()) == accepted + 6
    with pytest.raises(ValueError):
        simulator.set_rate_limit(0)


def test_an_injected_429_fault_carries_both_headers(simulator: Simulator) -> None:
    simulator.script_send_faults(["429"])
    with Api(simulator) as api:
        limited = api.send("oc_fault", "text", {"text": "x"})
    assert (limited.status_code, limited.json()) == (429, RATE_LIMITED)
    assert {"x-ogw-ratelimit-limit", "x-ogw-ratelimit-reset"} <= set(limited.headers)
    assert simulator.rate_limited_count() == 0 and simulator.fault_counts == {"429": 1}
