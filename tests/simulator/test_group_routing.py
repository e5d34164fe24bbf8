"""Two bots in one group on the simulator: a message that @mentions both goes to each app's
connection as its own event (same message id, each its own event id and app), one that
mentions one bot only to that app, and a redelivery goes as the named app's own event."""

from __future__ import annotations

import json
from typing import Any

from gateway.simulator import Simulator
from tests.simulator.test_apps import endpoint_url, raw_client, recv_frame

SECOND_ID, SECOND_SECRET = "cli_second", "second-secret"


def _event(raw: Any) -> tuple[str, str, str]:
    """(message_id, app_id, event_id) of the next event frame on a raw connection."""
    payload = json.loads(recv_frame(raw).payload)
    return (payload["event"]["message"]["message_id"], payload["header"]["app_id"],
            payload["header"]["event_id"])


def test_a_group_message_goes_to_each_mentioned_bot_as_its_own_event(
        simulator: Simulator) -> None:
    sim = simulator
    sim.add_app(SECOND_ID, SECOND_SECRET)
    with raw_client(endpoint_url(sim)) as first, \
            raw_client(endpoint_url(sim, SECOND_ID, SECOND_SECRET)) as second:
        sim.wait_connected(1, app_id=sim.app_id)
        sim.wait_connected(1, app_id=SECOND_ID)
        both = [sim.mention_bot("@_user_1"), sim.mention_bot("@_user_2", app_id=SECOND_ID)]
        mid = sim.send_text("oc_two_bots", "hello both", chat_type="group", mentions=both)
        one, two = _event(first), _event(second)
        assert (one[:2], two[:2]) == ((mid, sim.app_id), (mid, SECOND_ID))
        assert one[2] != two[2], "each app's event has its own event id"

        only_second = sim.send_text("oc_two_bots", "hi two", chat_type="group",
                                    mentions=[sim.mention_bot(app_id=SECOND_ID)])
        assert _event(second)[:2] == (only_second, SECOND_ID)
        only_first = sim.send_text("oc_two_bots", "hi one", chat_type="group",
                                   mentions=[sim.mention_bot()])
        assert _event(first)[:2] == (only_first, sim.app_id), "nothing else came to the first"

        sim.redeliver(mid, app_id=SECOND_ID)
        assert _event(second) == two, "the second app's own event, again"
        sim.redeliver(mid, app_id=sim.app_id)
        assert _event(first) == one
