"""Whose state a message belongs to: its chat's, or, when several of our apps may sit in one
chat, the state of that chat as one app (bot) sees it.

A chat's state (inbox, lease, fence, dedupe marks, session, history, approvals) is named by
one string, its *state id*, wherever the chat layer says `chat_id`: the sweeper index's
members, the control jobs' `chat`, `run_turn`'s `chat_id`, the turn ids, the logs.

- One app (the default): the state id is Feishu's chat id, `oc_…`, as it always was.
- Several apps (`FEISHU_APPS` lists more than one): `<chat_id>@<app_id>`, e.g.
  `oc_team@cli_b`, so two of our bots in one group each admit, dedupe, queue, stop and
  remember their own turns: each bot addressed answers once.

The listener picks the state id of each message it admits (it tags every message with its
app when it serves several); everything after that carries the state id along (the task's
arguments, the index, the control jobs), so a worker never guesses. Where a process starts
from a Feishu event rather than a turn (a recall, an edit, a card click, /approve), it derives
the state id the same way from the app the event came to: every process reads the same
`FEISHU_APPS`. State written under the bare chat id (a deployment of several apps before
this keying) is still an ordinary state id: it is swept, run and answered until it drains.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.model import Message

SEPARATOR = "@"
"""Between the chat id and the app id of a state id (neither id ever holds one)."""


def state_id(chat_id: str, app_id: str) -> str:
    """The state id of `chat_id` as app `app_id` sees it (the chat's own without an app)."""
    return f"{chat_id}{SEPARATOR}{app_id}" if app_id else chat_id


def split_state(state: str) -> tuple[str, str]:
    """A state id → (Feishu chat id, app id; "" when the state is the chat's own)."""
    chat_id, _, app_id = state.partition(SEPARATOR)
    return chat_id, app_id


def chat_of(state: str) -> str:
    """The Feishu chat id of a state id."""
    return split_state(state)[0]


@dataclass(frozen=True, slots=True)
class ChatScope:
    """How this deployment names a chat's state: by chat (`per_app=False`, one app), or by
    (chat, app). A message or event without an app belongs to `primary_app`."""

    per_app: bool = False
    primary_app: str = ""

    def of(self, chat_id: str, app_id: str = "") -> str:
        """The state id of `chat_id` for events that came to `app_id`."""
        if not self.per_app:
            return chat_id
        return state_id(chat_id, app_id or self.primary_app)

    def of_message(self, message: Message) -> str:
        return self.of(message.chat_id, message.app_id)

    def candidates(self, chat_id: str, apps: tuple[str, ...]) -> list[str]:
        """Every state id a chat may have here (for the operator): the chat's own (one
        app, or written before the keying by app), then one per app."""
        return [chat_id, *(state_id(chat_id, a) for a in apps if self.per_app and a)]
