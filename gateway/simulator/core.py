"""The simulator's lifecycle, identity and controls: its loop thread, apps and faults."""

from __future__ import annotations

import logging
import socket
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from aiohttp import web

from gateway.simulator import payloads as p
from gateway.simulator.apps import AppRegistry
from gateway.simulator.config import CARD_ANSWER_LIMIT_MS, FEISHU_REDELIVERY_S, SimConfig
from gateway.simulator.faults import FaultPlan, SendFaults
from gateway.simulator.listing import ListCall, Listing
from gateway.simulator.loop_thread import LoopThread
from gateway.simulator.observe import Observations
from gateway.simulator.redelivery import Redeliverer, RedeliveryPolicy
from gateway.simulator.server import Hub, build_app
from gateway.simulator.state import SimState
from gateway.simulator.webhook import WebhookConfig, WebhookPusher

logger = logging.getLogger(__name__)
T = TypeVar("T")


class SimulatorCore(Observations):
    """Everything of `Simulator` but the delivery of events (see events.py)."""

    def __init__(self, app_id: str = "cli_sim_app", app_secret: str = "sim-secret",
                 host: str = "127.0.0.1", port: int = 0, bot_open_id: str = "ou_sim_bot",
                 ping_interval_s: int = 120, reconnect_interval_s: int = 1,
                 reconnect_nonce_s: int = 0, *, app_name: str = "Simulator Bot",
                 delivery_timeout_s: float = 10.0,
                 redelivery_s: Sequence[float] = FEISHU_REDELIVERY_S,
                 card_answer_limit_ms: float = CARD_ANSWER_LIMIT_MS,
                 webhook: WebhookConfig | None = None) -> None:
        self.config = SimConfig(
            app_id=app_id, app_secret=app_secret, bot_open_id=bot_open_id, app_name=app_name,
            ping_interval_s=ping_interval_s, reconnect_interval_s=reconnect_interval_s,
            reconnect_nonce_s=reconnect_nonce_s)
        self.apps = AppRegistry(self.config)
        self.host, self.port = host, port
        self.delivery_timeout_s = delivery_timeout_s
        self.card_answer_limit_ms = card_answer_limit_ms
        self.webhook = webhook
        """Webhook mode: events are POSTed to `webhook_urls` (set_webhook_urls), not sent over
        the long connection."""
        self.redelivery = RedeliveryPolicy(tuple(redelivery_s))
        """When an event not answered 200 goes again, in either mode (Feishu's schedule;
        `redelivery_s=()`: never)."""
        self.state = SimState()
        self.faults = FaultPlan()
        self.listing = Listing()
        self._outage: set[str] = set()  # apps whose pushes are lost (set_outage)
        self.menu: list[tuple[str, str]] = []
        """The bot menu as the developer console sets it up: (event_key, label) of each
        item "push event" (the web chat shows it; `click_menu` clicks one)."""
        self._held: dict[str, tuple[bytes, str]] = {}  # message_id -> (event, app_id)
        self._worker: LoopThread | None = None
        self._runner: web.AppRunner | None = None
        self._hub: Hub | None = None
        self._redeliverer: Redeliverer | None = None
        self._pusher: WebhookPusher | None = None

    # lifecycle
    def start(self) -> Self:
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
        app, self._hub = build_app(self.apps, self.state, self.faults,
                                   card_limit_ms=self.card_answer_limit_ms,
                                   listing=self.listing)
        app.router.add_routes(self._user_routes())
        if self.webhook is not None:
            self._pusher = WebhookPusher(self.state, self.webhook, self._hub.answered)
        self._redeliverer = Redeliverer(self._hub, self.state, self.redelivery,
                                        push=self._pusher.deliver if self._pusher else None)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    def _user_routes(self) -> list[web.RouteDef]:
        """Routes for a person's side (the full Simulator adds its HTTP user API)."""
        return []

    async def _shutdown(self) -> None:
        if self._redeliverer is not None:
            await self._redeliverer.close()
        if self._pusher is not None:
            await self._pusher.close()
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
            self._runner = self._hub = self._redeliverer = self._pusher = None

    def __enter__(self) -> Self:
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
        """The primary app's id: the default app of every call."""
        return self.config.app_id

    @property
    def app_secret(self) -> str:
        return self.config.app_secret

    @property
    def bot_open_id(self) -> str:
        return self.config.bot_open_id

    def add_app(self, app_id: str, app_secret: str, *, bot_open_id: str | None = None,
                app_name: str | None = None) -> None:
        """Register another app (before or after start()). Its credentials open long
        connections and get tenant tokens; its bot answers /bot/v3/info with `bot_open_id`
        (default "ou_bot_<app_id without cli_>") and `app_name`. Events go to an app's
        connections only when a call names it with app_id=...; ValueError if known."""
        self.apps.add(app_id, app_secret, bot_open_id=bot_open_id, app_name=app_name)

    def bot_open_id_of(self, app_id: str | None = None) -> str:
        """The open_id of one app's bot (None: the primary app's)."""
        return self.apps.get(app_id).bot_open_id

    def mention_bot(self, key: str = "@_user_1", *, app_id: str | None = None) -> dict[str, Any]:
        """A mentions entry for an app's bot (default: the primary's); its key appears in
        the message text."""
        app = self.apps.get(app_id)
        return p.mention(key, app.bot_open_id, app.app_name, is_bot=True)

    @staticmethod
    def mention_user(open_id: str, name: str, key: str = "@_user_1") -> dict[str, Any]:
        """A mentions entry for a user."""
        return p.mention(key, open_id, name)

    # webhook mode
    def set_webhook_urls(self, urls: Sequence[str]) -> None:
        """Webhook mode: the request URLs pushes go to (round-robin, as a load balancer)."""
        if self.webhook is None:
            raise RuntimeError("simulator: not in webhook mode (Simulator(webhook=...))")
        pusher = self._pusher
        if pusher is None:
            raise RuntimeError("simulator is not running; call start() first")
        pusher.urls = list(urls)

    def verify_url(self, url: str) -> bool:
        """Feishu's URL verification of `url` (as when the request URL is saved): whether
        it answered the challenge."""
        pusher = self._pusher
        if pusher is None:
            raise RuntimeError("simulator: not in webhook mode, or not running")
        return self._call(pusher.verify_url(url), 10.0)

    # connections
    def drop_connections(self) -> int:
        """Abort every ws connection (silent ones too) without a close frame; returns how
        many were dropped."""
        return self._call(self._running_hub.drop_all(), 5.0)

    def go_silent(self, *, app_id: str | None = None) -> int:
        """Turn every open ws connection (of one app, with app_id) into a zombie: TCP stays
        established until the client closes it, but the simulator answers nothing on it
        (no websocket pong, no Feishu pong frame, no close frame back), ignores what it
        sends (ACKs included) and delivers nothing more to it. Returns how many went silent.

        Silent connections leave `connection_count` and `wait_connected` (which count live
        connections only); `silent_connection_count` counts them. How each one ends goes to
        `close_codes`: the code of the client's close frame, or None when the TCP dropped."""
        if app_id is not None:
            self.apps.get(app_id)
        return self._call(self._running_hub.go_silent(app_id), 5.0)

    def set_endpoint_available(self, available: bool) -> None:
        """When False, POST /callback/ws/endpoint answers HTTP 503 (the SDK keeps retrying)."""
        self._running_hub.endpoint_available = available

    def refuse_endpoint(self, code: int | None) -> None:
        """Answer the endpoint with this non-zero code (HTTP 200), which the SDK treats as
        final (e.g. 1000040350, too many connections); None serves it normally again."""
        self._running_hub.endpoint_refusal_code = code

    def expire_tokens(self) -> None:
        """Invalidate the tenant tokens issued so far (every app's); later calls with them
        get 99991663."""
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

    def fail_bot_info(self, kind: str | None = "5xx-html") -> None:
        """Fail every GET /bot/v3/info (the bot's identity) with `kind` ("5xx-json",
        "5xx-html", "429") until called with None."""
        self.faults.fail_bot_info(kind)

    def script_token_faults(self, kinds: Sequence[str]) -> None:
        """Queue faults for the next tenant_access_token requests: "5xx-json", "5xx-html",
        "429", "refuse" (HTTP 200, code 10014)."""
        self.faults.script_token(kinds)

    # outages and the messages list API
    def set_outage(self, lost: bool, *, app_id: str | None = None) -> None:
        """While `lost`, messages users send to the app (default: the primary) are created
        (the list API reads them, replies to them work) but never pushed: Feishu gave up
        redelivering them, as after a listener outage longer than its retries."""
        app = self.apps.get(app_id).app_id
        (self._outage.add if lost else self._outage.discard)(app)

    def push_lost(self, app_id: str) -> bool:
        return app_id in self._outage

    def fail_read(self, message_id: str, kind: str | None) -> None:
        """Fail every read of one message (im/v1/messages/:id) with `kind` ("5xx-json",
        ...) until called again with None."""
        self.faults.fail_read(message_id, kind)

    def script_list_faults(self, kinds: Sequence[str]) -> None:
        """Fail the next calls of the messages list API, one each: "5xx-json",
        "5xx-html", "429", "400-ratelimit" (a status may be pinned: "5xx-html:504")."""
        self.listing.script(kinds)

    def clear_list_faults(self) -> None:
        """Drop the list API faults scripted and not used yet."""
        self.listing.clear()

    def pause_listing(self, after: int = 0) -> None:
        """Answer `after` more calls of the messages list API, then hold every later one
        unanswered until `resume_listing()` (a listener may die meanwhile)."""
        self.listing.pause(after)

    def resume_listing(self) -> None:
        self.listing.resume()

    @property
    def list_calls(self) -> list[ListCall]:
        """Every call of the messages list API answered with messages, in order."""
        return self.listing.calls
