"""The synchronous, thread-safe façade: a fake Feishu running on its own loop and thread."""

from __future__ import annotations

import json
import logging
import socket
import uuid
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from aiohttp import web

from gateway.simulator import payloads as p
from gateway.simulator.config import SimConfig
from gateway.simulator.faults import FaultPlan, SendFaults
from gateway.simulator.loop_thread import LoopThread
from gateway.simulator.observe import Observations
from gateway.simulator.redelivery import Redeliverer, RedeliveryPolicy
from gateway.simulator.server import Hub, build_app
from gateway.simulator.state import MessageRecord, SimState

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Simulator(Observations):
    """A fake Feishu open platform on loopback for the real lark-oapi SDK.

    Events are delivered to exactly one connected client, round-robin. When no client
    is connected, a send waits up to `delivery_timeout_s` for one, then raises TimeoutError.

    With `redeliver_after_s` set, an event none of whose frames got an ACK with code 200
    is redelivered in the background as a new frame (same payload, same event_id) after
    `redeliver_after_s`, then twice that, ... up to `redeliver_cap_s`, at most
    `redeliver_max` times; a redelivery waits for a client to be connected.
    """

    def __init__(self, app_id: str = "cli_sim_app", app_secret: str = "sim-secret",
                 host: str = "127.0.0.1", port: int = 0, bot_open_id: str = "ou_sim_bot",
                 ping_interval_s: int = 120, reconnect_interval_s: int = 1,
                 reconnect_nonce_s: int = 0, *, app_name: str = "Simulator Bot",
                 delivery_timeout_s: float = 10.0, redeliver_after_s: float | None = None,
                 redeliver_max: int = 20, redeliver_cap_s: float = 8.0) -> None:
        self.config = SimConfig(
            app_id=app_id, app_secret=app_secret, bot_open_id=bot_open_id, app_name=app_name,
            ping_interval_s=ping_interval_s, reconnect_interval_s=reconnect_interval_s,
            reconnect_nonce_s=reconnect_nonce_s)
        self.host, self.port = host, port
        self.delivery_timeout_s = delivery_timeout_s
        self.redelivery = RedeliveryPolicy(redeliver_after_s, redeliver_max, redeliver_cap_s)
        self.state = SimState()
        self._held: dict[str, bytes] = {}
        self.faults = FaultPlan()
        self._worker: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self._hub: Hub | None = None
        self._redeliverer: Redeliverer | None = None

    # lifecycle
    def start(self) -> Simulator:
        """Bind (a free port when port=0), serve on a daemon thread, return self."""
        if self._worker is not None:
            raise RuntimeError("simulator already started")
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            self.port = int(sock.getsockname()[1])
            self._worker = LoopThread(f"feishu-simulator-{self.port}")
            self._worker.start()
            self._worker.call(self._startup(sock), 10.0)
        except BaseException:
            sock.close()
            self.stop()
            raise
        logger.info("feishu simulator listening on %s (app_id=%s)", self.url, self.app_id)
        return self

    async def _startup(self, sock: socket.socket) -> None:
        app, self._hub = build_app(self.config, self.state, self.faults)
        self._redeliverer = Redeliverer(self._hub, self.state, self.redelivery)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        if self._redeliverer is not None:
            await self._redeliverer.close()
        if self._hub is not None:
            await self._hub.close_all()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        """Close every ws with a close frame, stop the server, the loop and the thread."""
        worker, self._worker = self._worker, None
        if worker is None:
            return
        try:
            if self._runner is not None and worker.running:
                worker.call(self._shutdown(), 10.0)
        finally:
            worker.stop()
            self._runner = self._hub = self._redeliverer = None

    def __enter__(self) -> Simulator:
        return self if self._worker is not None else self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if self._worker is None:
            coro.close()
            raise RuntimeError("simulator is not running; call start() first")
        return self._worker.call(coro, timeout_s)

    @property
    def _running_hub(self) -> Hub:
        if self._hub is None:
            raise RuntimeError("simulator is not running; call start() first")
        return self._hub

    @property
    def _running_redeliverer(self) -> Redeliverer:
        if self._redeliverer is None:
            raise RuntimeError("simulator is not running; call start() first")
        return self._redeliverer

    # identity
    @property
    def url(self) -> str:
        """The base URL to use as FEISHU_DOMAIN, e.g. http://127.0.0.1:PORT."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def app_id(self) -> str:
        return self.config.app_id

    @property
    def app_secret(self) -> str:
        return self.config.app_secret

    @property
    def bot_open_id(self) -> str:
        return self.config.bot_open_id

    def mention_bot(self, key: str = "@_user_1") -> dict[str, Any]:
        """A mentions entry for the bot; its key appears in the message text."""
        return p.mention(key, self.bot_open_id, self.config.app_name, is_bot=True)

    @staticmethod
    def mention_user(open_id: str, name: str, key: str = "@_user_1") -> dict[str, Any]:
        """A mentions entry for a user."""
        return p.mention(key, open_id, name)

    # delivery
    def _deliver(self, payload: bytes, *, parts: int, frame_type: str,
                 message_id: str | None, event_key: str | None = None) -> str:
        redeliverer = self._running_redeliverer
        frame_id = uuid.uuid4().hex
        self.state.record_frame(frame_id, payload, message_id, event_key)
        self._call(redeliverer.deliver(
            payload, frame_id=frame_id, event_key=event_key or frame_id, frame_type=frame_type,
            parts=parts, message_id=message_id, timeout_s=self.delivery_timeout_s),
            self.delivery_timeout_s)
        return frame_id

    def send_message(self, chat_id: str, *, message_type: str, content: dict[str, Any] | str,
                     sender_open_id: str = "ou_user_1", chat_type: str = "p2p",
                     mentions: list[dict[str, Any]] | None = None,
                     message_id: str | None = None, thread_id: str | None = None,
                     root_id: str | None = None, parent_id: str | None = None,
                     parts: int = 1, deliver: bool = True) -> str:
        """Deliver an im.message.receive_v1 event of any type; returns its message_id.

        With deliver=False the message only exists on the platform (replies to it work),
        as when a listener took it and died before acting on it."""
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        incoming = p.IncomingMessage(
            message_id=message_id or p.new_id("om_"), chat_id=chat_id, chat_type=chat_type,
            message_type=message_type, content=text, sender_open_id=sender_open_id,
            create_time_ms=p.now_ms(), mentions=tuple(mentions or ()), root_id=root_id,
            parent_id=parent_id or root_id, thread_id=thread_id)
        self.state.put_message(MessageRecord(
            message_id=incoming.message_id, chat_id=chat_id, msg_type=message_type,
            content=text, from_bot=False, create_time_ms=incoming.create_time_ms,
            update_time_ms=incoming.create_time_ms, chat_type=chat_type, root_id=root_id,
            parent_id=incoming.parent_id, thread_id=thread_id))
        if chat_type == "p2p":
            self.state.remember_p2p_chat(sender_open_id, chat_id)
        event = _encode(p.message_receive_event(incoming, app_id=self.app_id))
        if deliver:
            self._deliver(event, parts=parts, frame_type="event", message_id=incoming.message_id)
        else:
            self._held[incoming.message_id] = event
        return incoming.message_id

    def deliver_held(self, message_id: str) -> str:
        """Deliver now a message sent earlier with deliver=False (its create_time is when it
        was sent): an event Feishu redelivers late. Returns the frame id."""
        return self._deliver(self._held.pop(message_id), parts=1, frame_type="event",
                             message_id=message_id)

    def withdraw(self, message_id: str) -> None:
        """The user recalls a message: replies to it get code 230011 from now on."""
        self.state.remove_message(message_id)

    def send_text(self, chat_id: str, text: str, *, sender_open_id: str = "ou_user_1",
                  chat_type: str = "p2p", mentions: list[dict[str, Any]] | None = None,
                  message_id: str | None = None, thread_id: str | None = None,
                  root_id: str | None = None, parts: int = 1, deliver: bool = True) -> str:
        """Deliver a text message; mention keys missing from `text` are prepended."""
        missing = [m["key"] for m in mentions or () if str(m.get("key", "")) not in text]
        full = " ".join([*missing, text]) if missing else text
        return self.send_message(
            chat_id, message_type="text", content={"text": full}, sender_open_id=sender_open_id,
            chat_type=chat_type, mentions=mentions, message_id=message_id, thread_id=thread_id,
            root_id=root_id, parts=parts, deliver=deliver)

    def send_event(self, payload: dict[str, Any] | bytes | str, *, parts: int = 1,
                   frame_type: str = "event") -> str:
        """Deliver a raw (possibly malformed) payload; returns the frame message_id.

        A dict with event.message (message_id, chat_id) is remembered, so the bot can reply.
        """
        message = p.event_message(payload) if isinstance(payload, dict) else None
        if message is not None:
            now = p.now_ms()
            self.state.put_message(MessageRecord(
                message_id=message["message_id"], chat_id=message["chat_id"],
                msg_type=str(message.get("message_type", "text")),
                content=str(message.get("content", "")), from_bot=False, create_time_ms=now,
                update_time_ms=now, root_id=message.get("root_id"),
                parent_id=message.get("parent_id"), thread_id=message.get("thread_id")))
        if isinstance(payload, dict):
            data = _encode(payload)
        else:
            data = payload.encode("utf-8") if isinstance(payload, str) else payload
        return self._deliver(data, parts=parts, frame_type=frame_type,
                             message_id=None if message is None else message["message_id"])

    def send_card_action(self, chat_id: str, open_message_id: str, operator_open_id: str,
                         value: dict[str, Any], *, parts: int = 1, tag: str = "button",
                         form_value: dict[str, Any] | None = None) -> str:
        """Deliver a card.action.trigger callback (type=event frame); returns the frame id."""
        event = p.card_action_event(
            app_id=self.app_id, chat_id=chat_id, open_message_id=open_message_id,
            operator_open_id=operator_open_id, value=value, tag=tag, form_value=form_value)
        return self._deliver(_encode(event), parts=parts, frame_type="event", message_id=None)

    def redeliver(self, message_id: str, *, parts: int = 1) -> str:
        """Re-send the same payload (same event_id) as a new frame; returns the new frame id.

        The frame joins its event: a 200 ACK of it stops automatic redelivery too."""
        frame = self.state.find_frame(message_id)
        if frame is None:
            raise KeyError(f"simulator never delivered a message or frame {message_id!r}")
        return self._deliver(frame.payload, parts=parts, frame_type="event",
                             message_id=frame.message_id, event_key=frame.event_key)

    def drop_connections(self) -> int:
        """Abort every ws connection without a close frame; returns how many were dropped."""
        return self._call(self._running_hub.drop_all(), 5.0)

    def set_endpoint_available(self, available: bool) -> None:
        """When False, POST /callback/ws/endpoint answers HTTP 503 (the SDK keeps retrying)."""
        self._running_hub.endpoint_available = available

    def refuse_endpoint(self, code: int | None) -> None:
        """Answer the endpoint with this non-zero code (HTTP 200), which the SDK treats as
        final (e.g. 1000040350, too many connections); None serves it normally again."""
        self._running_hub.endpoint_refusal_code = code

    def expire_tokens(self) -> None:
        """Invalidate issued tenant tokens; later calls with them get 99991663."""
        self.state.expire_tokens()

    # fault injection on the open APIs
    def set_send_faults(self, faults: SendFaults | None) -> None:
        """Fail sends (POST messages, POST messages/{id}/reply) at random with these
        probabilities, drawn from a Random seeded with faults.seed; None turns it off."""
        self.faults.set_send_faults(faults)

    def script_send_faults(self, kinds: Sequence[str]) -> None:
        """Queue faults for the next send requests, one each, before the random plan:
        "5xx-json", "5xx-html", "429", "400-ratelimit", "reset" (created, then the
        connection is reset). A status may be pinned: "5xx-json:503", "5xx-html:504"."""
        self.faults.script_send(kinds)

    def fail_uuid(self, uuid: str, kind: str | None = "5xx-json") -> None:
        """Fail every send with this uuid (one piece of one answer) until called with None."""
        self.faults.fail_uuid(uuid, kind)

    def script_token_faults(self, kinds: Sequence[str]) -> None:
        """Queue faults for the next tenant_access_token requests: "5xx-json", "5xx-html",
        "429", "refuse" (HTTP 200, code 10014)."""
        self.faults.script_token(kinds)


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")
