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

Under the order scope `thread` (GATEWAY_ORDER_SCOPE, the default), each thread or topic of a
chat is a state of its own: `<chat state>/<thread_id>` (`oc_team/omt_1`,
`oc_team@cli_b/omt_1`), so its turns run beside those of the chat's other topics, one at a
time and in order; a message outside any thread keeps the chat's own state. Only Feishu's
`thread_id` makes a topic (a `root_id` alone is a reply, not a topic). A topic's keys share
its chat's hash tag (and shard), where a few keys stay the chat's (gateway/chats/keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.model import Message

SEPARATOR = "@"
"""Between the chat id and the app id of a state id (neither id ever holds one)."""

TOPIC = "/"
"""Between a chat's state id and the thread id of one of its topics (no id holds one)."""


def state_id(chat_id: str, app_id: str, thread_id: str = "") -> str:
    """The state id of `chat_id` as app `app_id` sees it (the chat's own without an app), or
    of its topic `thread_id`."""
    state = f"{chat_id}{SEPARATOR}{app_id}" if app_id else chat_id
    return f"{state}{TOPIC}{thread_id}" if thread_id else state


def split_topic(state: str) -> tuple[str, str]:
    """A state id → (the chat's state id, the topic's thread id; "" outside topics)."""
    chat_state, _, thread_id = state.partition(TOPIC)
    return chat_state, thread_id


def split_state(state: str) -> tuple[str, str]:
    """A state id → (Feishu chat id, app id; "" when the state is the chat's own)."""
    chat_id, _, app_id = split_topic(state)[0].partition(SEPARATOR)
    return chat_id, app_id


def topic_of(state: str) -> str:
    """The thread id of a topic's state id; "" for a chat's own state."""
    return split_topic(state)[1]


def chat_of(state: str) -> str:
    """The Feishu chat id of a state id."""
    return split_state(state)[0]


@dataclass(frozen=True, slots=True)
class ChatScope:
    """How this deployment names a chat's state: by chat (`per_app=False`, one app), or by
    (chat, app). A message or event without an app belongs to `primary_app`."""

    per_app: bool = False
    primary_app: str = ""
    per_thread: bool = False
    """Each thread or topic a state of its own (GATEWAY_ORDER_SCOPE=thread)."""

    def of(self, chat_id: str, app_id: str = "", thread_id: str = "") -> str:
        """The state id of `chat_id` (or of its topic `thread_id`, under the order scope
        `thread`) for events that came to `app_id`."""
        thread = thread_id if self.per_thread else ""
        if not self.per_app:
            return state_id(chat_id, "", thread)
        return state_id(chat_id, app_id or self.primary_app, thread)

    def of_message(self, message: Message) -> str:
        return self.of(message.chat_id, message.app_id, message.thread_id)

    def candidates(self, chat_id: str, apps: tuple[str, ...]) -> list[str]:
        """Every state id a chat may have here (for the operator): the chat's own (one
        app, or written before the keying by app), then one per app."""
        return [chat_id, *(state_id(chat_id, a) for a in apps if self.per_app and a)]
