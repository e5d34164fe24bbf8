"""Reading a chat's messages back for catch-up, against the simulator over real HTTP: 5xx
answers (an HTML proxy page too) and rate limits are retried with backoff, a refusal is
not, and the lease is renewed before every attempt."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from gateway.core.errors import RejectedError
from gateway.feishu.outbound.openapi import OpenApi
from gateway.listener.catchup.pages import ChatPages, LeaseLost, Stopping
from gateway.simulator import Simulator

T0 = 1_700_000_000_000


@pytest.fixture
def api(simulator: Simulator) -> Iterator[OpenApi]:
    client = OpenApi(simulator.url, simulator.app_id, SecretStr(simulator.app_secret))
    yield client
    client.close()


def pages_of(api: OpenApi, stopping: threading.Event | None = None) -> ChatPages:
    return ChatPages(lambda app_id: api, None, page_size=2,
                     stopping=stopping or threading.Event())


def test_faults_are_retried_and_the_pages_come_in_order(simulator: Simulator,
                                                        api: OpenApi) -> None:
    ids = [simulator.send_text("oc_pages", f"m{n}", deliver=False, create_time_ms=T0 + n)
           for n in range(3)]
    simulator.script_list_faults(["5xx-html", "5xx-json", "429"])
    renewed: list[int] = []

    def renew() -> bool:
        renewed.append(1)
        return True

    reader = pages_of(api)
    first = reader.page(simulator.app_id, "oc_pages", T0, T0 + 1000, "", renew)
    assert [i["message_id"] for i in first.items] == ids[:2] and first.has_more
    assert len(renewed) == 4, "the lease renewed before each of the 4 attempts"
    rest = reader.page(simulator.app_id, "oc_pages", T0, T0 + 1000, first.token, lambda: True)
    assert [i["message_id"] for i in rest.items] == ids[2:] and not rest.has_more
    assert simulator.state.counters("fault:list:") == {"5xx-html": 1, "5xx-json": 1, "429": 1}


def test_a_refusal_a_lost_lease_and_a_stop_end_the_read(simulator: Simulator,
                                                        api: OpenApi) -> None:
    reader = pages_of(api)
    with pytest.raises(RejectedError):
        reader.page(simulator.app_id, "oc_pages", T0, T0, "not-a-token", lambda: True)
    with pytest.raises(LeaseLost):
        reader.page(simulator.app_id, "oc_pages", T0, T0, "", lambda: False)
    stopping = threading.Event()
    stopping.set()
    with pytest.raises(Stopping):
        pages_of(api, stopping).page(simulator.app_id, "oc_x", T0, T0, "", lambda: True)
