"""The bot's menu, end to end (simulator, real listener, real workers): a click on a key
FEISHU_MENU maps is echoed into the person's direct chat and taken as the text they typed
(answered in reply to the echo), or runs its command (/stop stops the running turn, in the
chat's order); a click Feishu delivers again is answered once; a key not mapped gets one log
line and no reply; a malformed click one line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator import Simulator
from gateway.simulator.chat_events import menu_event
from gateway.simulator.records import SentMessage
from tests.support.replies import CONFIRMED, command_answer, reply_of, started
from tests.support.rig import Rig, rig_up

MENU = {"hello": "menu says hi", "halt": "/stop", "fresh": "/new"}


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, FEISHU_MENU=json.dumps(MENU)) as rig:
        yield rig


def echoes(sim: Simulator, person: str) -> list[SentMessage]:
    return [m for m in sim.sent_messages() if m.text.startswith("☰ ")
            and m.chat_id == sim.p2p_chat_of(person)]


def echo_of(sim: Simulator, person: str, count: int = 1) -> SentMessage:
    found = wait_until(lambda: len(echoes(sim, person)) >= count and echoes(sim, person), 20,
                       f"{count} menu echo(es) for {person}")
    assert isinstance(found, list)
    last: SentMessage = found[-1]
    return last


def test_a_click_is_echoed_in_the_persons_direct_chat_and_answered_as_typed(
        rig: Rig) -> None:
    sim, ann = rig.sim, "ou_menu_ann"
    sim.click_menu("hello", operator_open_id=ann)
    echo = echo_of(sim, ann)
    assert echo.text == "☰ menu says hi"
    assert reply_of(sim, echo.chat_id, echo.message_id) == "echo: menu says hi"


def test_a_click_delivered_again_is_answered_once(rig: Rig) -> None:
    sim, bob = rig.sim, "ou_menu_bob"
    click = menu_event("hello", bob, app_id=sim.apps.get(None).app_id)
    sim.send_event(click)
    sim.send_event(click)
    echo = echo_of(sim, bob)
    assert reply_of(sim, echo.chat_id, echo.message_id) == "echo: menu says hi"
    after = sim.send_text(echo.chat_id, "after", sender_open_id=bob)
    assert reply_of(sim, echo.chat_id, after) == "echo: after"
    assert len(echoes(sim, bob)) == 1


def test_a_stop_from_the_menu_stops_the_running_turn(rig: Rig) -> None:
    sim, cat = rig.sim, "ou_menu_cat"
    sim.click_menu("hello", operator_open_id=cat)  # (the direct chat exists from here)
    dm = echo_of(sim, cat).chat_id
    long_turn = sim.send_text(dm, "sleep 30", sender_open_id=cat)
    wait_until(lambda: started(rig.client(), dm, long_turn), 20, "the long turn")
    sim.click_menu("halt", operator_open_id=cat)
    stop = echo_of(sim, cat, 2)
    assert stop.text == "☰ /stop"
    assert command_answer(sim, dm, stop.message_id) in (CONFIRMED, "Stopped.")
    assert reply_of(sim, dm, sim.send_text(dm, "next", sender_open_id=cat)) == "echo: next"


def test_a_key_not_mapped_and_a_malformed_click_get_one_line_and_no_reply(rig: Rig) -> None:
    sim, dan = rig.sim, "ou_menu_dan"
    sim.click_menu("nowhere", operator_open_id=dan)
    sim.send_event({"schema": "2.0", "header": {"event_id": "ev_menu_bad",
                    "event_type": "application.bot.menu_v6"}, "event": {"event_key": "hello"}})
    wait_until(lambda: "menu key 'nowhere' clicked by" in rig.fleet.logs("listener"), 20,
               "the unmapped key's line")
    wait_until(lambda: "menu event dropped: menu event without the operator's open_id"
               in rig.fleet.logs("listener"), 20, "the malformed click's line")
    sim.click_menu("hello", operator_open_id=dan)  # (the next click is answered: nothing stuck)
    echo = echo_of(sim, dan)
    assert reply_of(sim, echo.chat_id, echo.message_id) == "echo: menu says hi"
    assert len(echoes(sim, dan)) == 1
