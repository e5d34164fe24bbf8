"""A listener that starts while Feishu's open API fails: the bot's identity is unknown, so a
group @mention cannot be judged. It is never ACKed as handled (Feishu delivers it again),
the identity is asked for with backoff, `status` and `health listener` say it is unknown,
and once it is known the message is answered, once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gateway.core.presence import read_connections
from gateway.ops.processes import wait_until
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up


@pytest.fixture
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, start="nothing", FEISHU_REQUIRE_MENTION="true") as rig:
        rig.sim.fail_bot_info("5xx-html")
        yield rig.up()


def health(rig: Rig) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway.ops.cli", "health", "listener"],
                          env=rig.env, capture_output=True, text=True, timeout=60)


def test_a_group_mention_waits_for_the_bots_identity_and_is_answered_once(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    client = rig.client()
    wait_until(lambda: any(c.get("identity_known") is False
                           for c in read_connections(client).values()), 20,
               "the listener to report its unknown identity")
    sick = health(rig)
    assert sick.returncode == 1 and "bot identity unknown" in sick.stderr, sick.stderr
    status = subprocess.run([sys.executable, "-m", "gateway.ops.cli", "status", "--json"],
                            env=rig.env, capture_output=True, text=True, timeout=60)
    [connection] = json.loads(status.stdout)["connections"].values()
    assert connection["identity_known"] is False

    asked = sim.send_text(chat_id, "are you there?", chat_type="group",
                          mentions=[sim.mention_bot()])
    sim.wait_for_redeliveries(2, timeout_s=20)  # not ACKed as handled: delivered again
    assert not [a for a in sim.acks if a.message_id == asked and a.code == 200]
    assert replies_to(sim, chat_id) == {}

    sim.fail_bot_info(None)
    wait_until(lambda: asked in replies_to(sim, chat_id), 60, "the answer")
    sim.wait_redeliveries_settled(timeout_s=30)
    assert replies_to(sim, chat_id) == {asked: ["echo: are you there?"]}
    assert health(rig).returncode == 0
    assert "bot identity of app" in rig.fleet.logs("listener")
    client.close()
