"""The Celery app's tasks: one per turn, the release of an agent in the process that
built it, and a reaction handed to the agent factory's hook. The worker process's wiring
and its signal handlers are gateway/worker's."""

from __future__ import annotations

import time
from typing import Any

from celery import Task

from gateway.broker.names import ON_REACTION, POST_MESSAGE, RELEASE_AGENT, RUN_TURN
from gateway.chats.store_types import TurnRef
from gateway.core import metrics
from gateway.worker.hooks import connect
from gateway.worker.revokes import RevokeLane
from gateway.worker.shutdown import ShutdownNotice
from gateway.worker.worker_process import WorkerProcess
from tasks import app

process = WorkerProcess(app)
shutdown = ShutdownNotice(lambda: process.runtime().runner.leave())
revokes = RevokeLane(lambda: process.runtime().canceller)


@app.task(name=RUN_TURN, bind=True)
def run_turn(self: Task, chat_id: str, message_id: str, fence: int, sent_ms: int = 0) -> str:
    """Answer the head message of `chat_id` if `fence` still holds its lease. `sent_ms`:
    when it was published (wall clock), for the queue-time metric."""
    if sent_ms:
        metrics.turn_started(time.time() - sent_ms / 1000)
    shutdown.watch()
    return process.runtime().runner.run(TurnRef(chat_id, message_id, fence),
                                        task_id=str(self.request.id),
                                        worker=str(self.request.hostname))


@app.task(name=POST_MESSAGE, bind=True)
def post_message(self: Task, chat_id: str, text: str = "", *, key: str = "",
                 thread_id: str = "", card: dict[str, Any] | None = None,
                 image_path: str = "", file_path: str = "", app_id: str = "") -> str:
    """Post `text` (markdown), `card`, or the image or file at a path (on the worker's
    machine) to `chat_id` (in its thread `thread_id`) as the bot (app `app_id` of
    FEISHU_APPS; the first by default), queued in the chat's order and sent as replies are.
    `key`: the idempotency key (default: this task's id, so a redelivered or retried task
    posts once). Returns what posting did (gateway/chats/outbound.py); a message that
    cannot be sent fails the task with one clear line."""
    from gateway.chats.outbound import Outbound, post
    from gateway.worker.media_sender import upload_at

    rt = process.runtime()
    primary = rt.settings.primary_app_id
    app = "" if app_id in ("", primary) else app_id
    media = upload_at(rt.replies, app, image_path, file_path) \
        if image_path or file_path else ""
    out = Outbound(chat_id, key or str(self.request.id), text=text, card=card,
                   thread_id=thread_id, app_id=app, media=media)
    posted = post(rt.store, rt.publisher.publish, out, sender_app=app_id or primary,
                  max_text_chars=rt.settings.max_text_chars)
    return posted.describe()


@app.task(name=RELEASE_AGENT)
def release_agent(owner: str, token: str, cause: str, session: str = "") -> str:
    """Release an agent the cache of process `owner` let go (low-priority queue). It is
    released in the process that built it, on that process's release lane: here, when this
    task runs there; else the token is handed back to the owner through Redis."""
    rt = process.runtime()
    if owner == rt.process_id:
        return "released here" if rt.agents.lane.deliver(token) else "released already"
    rt.release_post.hand_back(owner, token)
    return "handed back"


@app.task(name=ON_REACTION)
def on_reaction(reaction: dict[str, Any]) -> str:
    """Hand a reaction on one of the bot's answers to the agent factory's `on_reaction`
    hook, if it has one (low-priority queue; gateway/worker/reaction_hook.py)."""
    from gateway.worker.reaction_hook import deliver

    rt = process.runtime()
    return deliver(rt.factory, rt.agent_context, reaction)


connect([*process.hooks(), shutdown, revokes], turn_task=run_turn)
