"""How the operator names one bot's state of a chat (gateway/ops/cli/naming.py): the chat
alone with one app; with several, CHAT_ID@APP_ID or --app, the chat alone meaning each one."""

from __future__ import annotations

import pytest

from gateway.chats.scope import ChatScope
from gateway.core.errors import Refused
from gateway.ops.cli.naming import named

ONE = ChatScope()
TWO = ChatScope(per_app=True, primary_app="cli_a")
APPS = ("cli_a", "cli_b")


def test_one_app_names_the_chat_as_it_always_did() -> None:
    assert named(ONE, "oc_team", "", ("cli_a",)) == ["oc_team"]
    assert named(ONE, "oc_team", "cli_a", ("cli_a",)) == ["oc_team"]


def test_several_apps_name_each_bots_state_or_all_of_them() -> None:
    assert named(TWO, "oc_team", "", APPS) == ["oc_team", "oc_team@cli_a", "oc_team@cli_b"]
    assert named(TWO, "oc_team", "cli_b", APPS) == ["oc_team@cli_b"]
    assert named(TWO, "oc_team@cli_b", "", APPS) == ["oc_team@cli_b"]
    assert named(TWO, "oc_team@cli_b", "cli_b", APPS) == ["oc_team@cli_b"]
    assert named(TWO, "oc_team@", "", APPS) == ["oc_team"], "the state kept by chat alone"
    with pytest.raises(Refused, match="--app says cli_a"):
        named(TWO, "oc_team@cli_b", "cli_a", APPS)
    with pytest.raises(Refused, match="names no chat"):
        named(TWO, "@cli_b", "", APPS)
