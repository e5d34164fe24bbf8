"""The simulator's user side over HTTP, for the demo's web chat and `feishu-gateway
simulator send`: a person sends messages and card clicks and reads what the bot sent.

    POST /sim/v1/messages       {"chat_id", "text", "chat_type": "p2p"|"group",
                                 "sender_open_id", "mention_bot": bool} → {"message_id"}
    GET  /sim/v1/messages?chat_id=…&reactions_of=id,id
                                → {"items": [the bot's messages, oldest first],
                                   "user_messages": [what users sent, oldest first:
                                       {"message_id", "text" (@mentions by name),
                                        "sender_open_id", "chat_type", "mentions_bot",
                                        "reply_to", "at" (its create time, s),
                                        "ack_codes": [the code of each ACK of it]}],
                                   "reactions": {id: [emoji types on that message]}}
                                  (reactions: of each user message and of reactions_of)
    GET  /                      the web chat (webchat.html), built on these calls
    POST /sim/v1/card_actions   {"chat_id", "message_id", "operator_open_id", "value": {…}}
                                → {"frame_id"} (the click went to the bot)
    POST /sim/v1/recall         {"message_id"} → {"frame_id"} (the user withdrew it)
    POST /sim/v1/edit           {"message_id", "text"} → {"frame_id"} (the user edited it)
    POST /sim/v1/membership     {"chat_id", "action": "add"|"remove", "operator_open_id"}
                                → {"frame_id"} (the bot added to / removed from a group)
    POST /sim/v1/p2p_entered    {"open_id"} → {"frame_id"} (the user opened the bot's DM)

Every call needs a Host that names a loopback address (localhost, 127.x, [::1]) or the
address the simulator is bound to, at any port (403 otherwise): a page of another site
cannot reach it through DNS rebinding, whose requests carry that site's name as their Host.
The POSTs take Content-Type: application/json only (415 otherwise) and, when the request
has an Origin, only the simulator's own (403 otherwise): a page of another site the user
visits cannot make them send messages or click cards (a cross-site form or a fetch without
a CORS preflight cannot send application/json). A send the simulator cannot deliver (no
bot connected) is a 503 with the reason, and what to start, in one line.

The calls block on the simulator's own loop, so each runs on an executor thread."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import SplitResult, urlsplit

from aiohttp import hdrs, web

from gateway.simulator.chat_events import ChatEventDelivery
from gateway.simulator.downloads import content_disposition
from gateway.simulator.events import EventDelivery
from gateway.simulator.payloads import new_id
from gateway.simulator.records import MessageRecord
from gateway.simulator.server import NoBotConnected

T = TypeVar("T")
PREFIX = "/sim/v1"
Handler = Callable[[web.Request], Awaitable[web.Response]]


def _bad(detail: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=detail)


def local_host(host: str | None, bound: str) -> bool:
    """`host` (a Host header) names a loopback address or `bound`, the address the simulator
    listens on, at any port (a forwarded port is fine): names no other site can point at
    the simulator. A malformed Host is not."""
    if not host or any(c in host for c in "/?#@"):
        return False
    try:
        url = urlsplit(f"//{host}")
        name, _ = url.hostname, url.port  # a malformed port raises
    except ValueError:
        return False
    if name is None:
        return False
    if name in ("localhost", bound.lower()):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a name, not an address
        return False


def _for_local_host(bound: str, handler: Handler) -> Handler:
    """`handler`, answering only requests whose Host passes `local_host` (403 otherwise)."""

    @functools.wraps(handler)
    async def guarded(request: web.Request) -> web.Response:
        host = request.headers.get(hdrs.HOST)
        if not local_host(host, bound):
            raise web.HTTPForbidden(text=f"host {host or '(none)'} is refused: the simulator "
                                         f"answers only for a loopback address or {bound}")
        return await handler(request)

    return guarded


def _same_origin(request: web.Request) -> bool:
    """No Origin (not a browser's cross-site call), or the host:port the request was sent to
    (its Host)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return True
    try:
        theirs, ours = urlsplit(origin), urlsplit(f"{request.scheme}://{request.host}")
        return theirs.hostname is not None and (theirs.hostname, _port(theirs)) == (
            ours.hostname, _port(ours))
    except ValueError:  # a malformed Origin or port
        return False


def _port(url: SplitResult) -> int | None:
    """The URL's port, its scheme's default when it names none."""
    return url.port or {"http": 80, "https": 443}.get(url.scheme)


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object a POST carries, from the simulator's own page or a non-browser
    client only."""
    if not _same_origin(request):
        raise web.HTTPForbidden(text=f"a page of another origin ({request.headers[hdrs.ORIGIN]}) "
                                     "cannot post to the simulator")
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(
            text="the body must be sent as Content-Type: application/json")
    try:
        body = await request.json()
    except ValueError:
        raise _bad("the body must be JSON") from None
    if not isinstance(body, dict):
        raise _bad("the body must be a JSON object")
    return body


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if not isinstance(value, str) or not value:
        raise _bad(f"{name} must be a non-empty string")
    return value


def no_bot_line(sim: EventDelivery) -> str:
    """Why a user's message or click was not sent when no bot is connected, and what to
    start, in the words of someone running the gateway."""
    return ("no bot is connected to this simulator yet: start `feishu-gateway listen` with "
            f"FEISHU_DOMAIN={sim.url} and FEISHU_APP_ID={sim.app_id} (the export lines "
            "`feishu-gateway simulator` printed)")


async def _off_loop(sim: EventDelivery, call: Callable[[], T]) -> T:
    """`call` on an executor thread; the simulator's failure to deliver (no client of the
    app connected: NoBotConnected; stopped: RuntimeError) is a 503 with its reason."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, call)
    except NoBotConnected:
        raise web.HTTPServiceUnavailable(text=no_bot_line(sim)) from None
    except (TimeoutError, RuntimeError, OSError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise web.HTTPServiceUnavailable(text=f"not delivered: {reason}") from None


def user_routes(sim: ChatEventDelivery) -> list[web.RouteDef]:
    async def send(request: web.Request) -> web.Response:
        body = await _body(request)
        chat_type = _text(body, "chat_type", "p2p")
        if chat_type not in ("p2p", "group"):
            raise _bad("chat_type must be p2p or group")
        mentions = [sim.mention_bot()] if body.get("mention_bot") is True else None
        thread = body.get("thread_id") or ""  # a topic group: "new" starts a topic
        if not isinstance(thread, str):
            raise _bad("thread_id must be a string")
        root = None
        if thread == "new":
            thread = new_id("omt_")
        elif thread:
            first = sorted(sim.state.thread_history(thread), key=lambda r: r.create_time_ms)
            if not first:
                raise _bad(f"no topic {thread}")
            root = first[0].message_id
        message_id = await _off_loop(sim, functools.partial(
            sim.send_text, _text(body, "chat_id"), _text(body, "text"), chat_type=chat_type,
            sender_open_id=_text(body, "sender_open_id", "ou_user_1"), mentions=mentions,
            thread_id=thread or None, root_id=root, parent_id=root))
        return web.json_response({"message_id": message_id, "thread_id": thread})

    async def read(request: web.Request) -> web.Response:
        chat_id = request.query.get("chat_id", "")
        if not chat_id:
            raise _bad("chat_id is required")
        items = [asdict(m) for m in sim.sent_messages(chat_id)]
        users = [_user_message(sim, r) for r in sim.state.user_records(chat_id)]
        asked = [i for i in request.query.get("reactions_of", "").split(",") if i][:200]
        asked += [m["message_id"] for m in users] + [m["message_id"] for m in items]
        return web.json_response({"items": items, "user_messages": users,
                                  "reactions": {i: sim.reactions(i) for i in asked}},
                                 dumps=_dumps)

    async def resource(request: web.Request) -> web.Response:
        """The bytes an image or file message shows, for the web chat to draw or offer."""
        message_id = request.match_info["message_id"]
        rec = sim.state.get_message(message_id)
        content = sim.get_message(message_id)
        key = None if content is None else (content.content.get("image_key")
                                             or content.content.get("file_key"))
        found = sim.state.resources.get(message_id, key) if isinstance(key, str) else None
        if rec is None or found is None:
            raise web.HTTPNotFound(text="no image or file of that message")
        return web.Response(body=found.data, content_type=found.content_type, headers={
            "Content-Disposition": content_disposition(found.name).replace(
                "attachment", "inline" if found.kind == "image" else "attachment", 1)})

    async def upload(request: web.Request) -> web.Response:
        """An image a bot uploaded, by its key (a card's `img` element shows it)."""
        found = sim.state.uploads.get(request.match_info["key"])
        if found is None:
            raise web.HTTPNotFound(text="no upload of that key")
        return web.Response(body=found.data, content_type="image/png"
                            if found.kind == "image" else "application/octet-stream")

    async def page(request: web.Request) -> web.Response:
        html = resources.files("gateway.simulator").joinpath("webchat.html").read_text(
            encoding="utf-8")
        return web.Response(text=html, content_type="text/html")

    async def click(request: web.Request) -> web.Response:
        body = await _body(request)
        value = body.get("value")
        if not isinstance(value, dict):
            raise _bad("value must be a JSON object")
        form_value = body.get("form_value")
        if form_value is not None and not isinstance(form_value, dict):
            raise _bad("form_value must be a JSON object")
        frame_id = await _off_loop(sim, functools.partial(
            sim.send_card_action, _text(body, "chat_id"), _text(body, "message_id"),
            _text(body, "operator_open_id", "ou_user_1"), value, form_value=form_value))
        try:  # (the toast the bot answers with, for the page to show)
            answered = await _off_loop(sim, functools.partial(sim.card_response, frame_id, 5))
        except TimeoutError:
            return web.json_response({"frame_id": frame_id, "toast": None})
        return web.json_response({"frame_id": frame_id, "toast": answered.toast})

    async def menu(request: web.Request) -> web.Response:
        """GET: the bot menu's items; POST {event_key, chat_id}: the page's person clicks
        one, in their direct chat `chat_id` (where the bot's echo and answer then show)."""
        if request.method == "GET":
            return web.json_response({"items": [{"key": k, "label": v} for k, v in sim.menu]})
        body = await _body(request)
        key, me = _text(body, "event_key"), _text(body, "operator_open_id", "ou_user_1")
        if key not in {k for k, _ in sim.menu}:
            raise _bad(f"no menu item {key!r}")
        app = sim.apps.get(None).app_id
        if sim.state.p2p_chat(app, me) is None:
            sim.state.remember_p2p_chat(app, me, _text(body, "chat_id"))
        frame_id = await _off_loop(sim, functools.partial(sim.click_menu, key,
                                                          operator_open_id=me))
        return web.json_response({"frame_id": frame_id})

    async def react(request: web.Request) -> web.Response:
        """{message_id, emoji, action: add | remove}: the page's person reacts to a message
        (takes their reaction back)."""
        body = await _body(request)
        message_id, emoji = _text(body, "message_id"), _text(body, "emoji")
        me = _text(body, "operator_open_id", "ou_user_1")
        call: Callable[[], object]
        if _text(body, "action", "add") == "remove":
            reaction_id = sim.state.reaction_of(message_id, emoji)
            if reaction_id is None:
                raise web.HTTPNotFound(text="no such reaction")
            call = functools.partial(sim.unreact, message_id, reaction_id,
                                     operator_open_id=me)
        else:
            call = functools.partial(sim.react, message_id, emoji, operator_open_id=me)
        try:
            await _off_loop(sim, call)
        except KeyError as error:
            raise web.HTTPNotFound(text=str(error)) from None
        return web.json_response({"ok": True})

    async def change(request: web.Request) -> web.Response:
        body, what = await _body(request), request.match_info["what"]
        call: Callable[[], object]
        if what == "recall":
            call = functools.partial(sim.recall, _text(body, "message_id"))
        elif what == "edit":
            call = functools.partial(sim.edit, _text(body, "message_id"), _text(body, "text"))
        elif what == "p2p_entered":
            call = functools.partial(sim.open_p2p, _text(body, "open_id", "ou_user_1"))
        else:
            action = _text(body, "action")
            if action not in ("add", "remove"):
                raise _bad("action must be add or remove")
            call = functools.partial(sim.add_bot if action == "add" else sim.remove_bot,
                                     _text(body, "chat_id"), operator_open_id=_text(
                                         body, "operator_open_id", "ou_user_1"))
        try:
            frame_id = await _off_loop(sim, call)
        except KeyError as error:
            raise web.HTTPNotFound(text=str(error)) from None
        return web.json_response({"frame_id": frame_id})

    def local(handler: Handler) -> Handler:
        return _for_local_host(sim.host, handler)

    return [web.post(f"{PREFIX}/messages", local(send)), web.get(f"{PREFIX}/messages", local(read)),
            web.post(f"{PREFIX}/card_actions", local(click)),
            web.get(f"{PREFIX}/menu", local(menu)), web.post(f"{PREFIX}/menu", local(menu)),
            web.post(f"{PREFIX}/reactions", local(react)),
            web.post(PREFIX + "/{what:recall|edit|membership|p2p_entered}", local(change)),
            web.get(PREFIX + "/resources/{message_id}", local(resource)),
            web.get(PREFIX + "/uploads/{key}", local(upload)),
            web.get("/", local(page))]


def _user_message(sim: EventDelivery, rec: MessageRecord) -> dict[str, Any]:
    """A user's message as the web chat shows it: each @mention key replaced by its name."""
    text = sim.state.view(rec).text
    for mention in rec.mentions:
        if key := str(mention.get("key") or ""):
            text = text.replace(key, f"@{mention.get('name') or key}")
    app = sim.apps.find(rec.app_id)
    ids = [m.get("id") for m in rec.mentions]
    return {"message_id": rec.message_id, "text": text, "sender_open_id": rec.sender_open_id,
            "chat_type": rec.chat_type, "reply_to": rec.parent_id, "thread_id": rec.thread_id,
            "mentions_bot": app is not None and any(
                isinstance(i, dict) and i.get("open_id") == app.bot_open_id for i in ids),
            "at": rec.create_time_ms / 1000,
            "ack_codes": [a.code for a in sim.acks_of(rec.message_id)]}


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, default=str)
