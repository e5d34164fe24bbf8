"""How an operator names one bot's state of a chat (`chat`, `stop`, `retry`, `purge`).

With one app a chat has one state, named by its chat id (`oc_team`). When FEISHU_APPS lists
several apps, each app's bot keeps its own state of the chat (gateway/chats/scope.py), named
`<chat_id>@<app_id>` (`oc_team@cli_b`, as `chats` and the turn ids print it); so:

- `oc_team@cli_b`, or `oc_team --app cli_b`: that bot's state;
- `oc_team` alone: every state Redis knows of the chat (`chat` shows each), or the one
  (the acting commands refuse when several bots have state there, and list them);
- `oc_team@`: the state kept by chat alone, from before the keying by app.

Under the order scope `thread`, each topic of a chat has its own state, named
`<chat state>/<thread_id>` (`oc_team/omt_1`, `oc_team@cli_b/omt_1`): the acting commands
act on the topic so named, and `chat oc_team` lists the chat's topics under its own state.

A turn id (`revoke`, `retry`) carries its state id already.
"""

from __future__ import annotations

from gateway.chats.admin import known
from gateway.chats.scope import SEPARATOR, TOPIC, ChatScope, split_state, split_topic, state_id
from gateway.core.errors import Refused
from gateway.ops.cli.context import Ops


def named(scope: ChatScope, name: str, app: str, apps: tuple[str, ...]) -> list[str]:
    """The state ids `name` (and `--app`) may mean, most specific first (pure)."""
    chat_state, thread_id = split_topic(name)
    if thread_id:
        return [f"{s}{TOPIC}{thread_id}" for s in named(scope, chat_state, app, apps)]
    chat, own = split_state(name)
    if not chat:
        raise Refused(f"{name!r} names no chat (they read oc_…, or oc_…@cli_… for one bot)")
    if SEPARATOR in name:
        if app and app != own:
            raise Refused(f"{name} names app {own or '(none)'}, --app says {app}")
        return [state_id(chat, own)]
    if app:
        return [scope.of(chat, app)]
    return scope.candidates(chat, apps)


def states(ops: Ops, name: str, app: str = "") -> list[str]:
    """Every state named that Redis knows; Refused when none (most likely a typo)."""
    apps = tuple(a for a, _ in ops.settings.apps)
    wanted = named(ops.store.keyspace.scope, name, app, apps)
    found = [s for s in wanted if known(ops.store, s)]
    if not found:
        what = f"chat {name}" + (f" (app {app})" if app else "")
        raise Refused(f"{what} is unknown: Redis has no message, turn or history of it (a "
                      "typo? `feishu-gateway chats` lists the active ones)")
    return found


def state(ops: Ops, name: str, app: str = "") -> str:
    """The one state named; Refused when several bots have state in the chat."""
    found = states(ops, name, app)
    if len(found) > 1:
        raise Refused(f"chat {name} has the state of {len(found)} bots: name one with --app "
                      f"or as {' or '.join(found)}")
    return found[0]
