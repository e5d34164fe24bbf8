"""aiohttp handlers for the open APIs the bot uses: token, bot info, messages (send,
reply, edit, get), reactions; CardKit (cardkit.py) and message resources (downloads.py).

A bot removed from a chat (Simulator.remove_bot) gets 230002 for every send to it.
Messages that are gone: a withdrawn one answers 230011 ("The message is recalled", as the
reply docs list it), one that never existed 231003 ("The message is not found, maybe not
exist or deleted", as the reaction docs list it; the reply and get docs name no code).
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from aiohttp import web

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.callers import authorize, limit_sends
from gateway.simulator.cardkit import CardKitApi
from gateway.simulator.config import SimConfig
from gateway.simulator.content import card_reference, check_content
from gateway.simulator.downloads import ResourceApi
from gateway.simulator.faults import RESET, FaultPlan, abort_connection, fault_response
from gateway.simulator.listing import Listing, ListingApi
from gateway.simulator.payloads import api_message_object, new_id, now_ms
from gateway.simulator.records import MessageRecord
from gateway.simulator.state import SimState
from gateway.simulator.uploads import UploadApi, shown_upload
from gateway.simulator.wire import ApiError, Handler, json_body, ok, peek_uuid, require_str

RECEIVE_ID_TYPES = frozenset({"open_id", "user_id", "union_id", "email", "chat_id"})
USER_ID_TYPES = frozenset({"open_id", "user_id", "union_id"})
TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"


class OpenApi:
    """Route handlers sharing the simulator's apps and state. Every call acts as the app
    its Bearer token was issued to."""

    def __init__(self, apps: AppRegistry, state: SimState,
                 faults: FaultPlan | None = None, listing: Listing | None = None) -> None:
        self.apps, self.state = apps, state
        self.faults = faults or FaultPlan()
        self.listing = listing or Listing()

    def routes(self) -> list[web.RouteDef]:
        base = "/open-apis/im/v1/messages"
        limited = self._limited
        return [
            web.post(TOKEN_PATH, self._token_faults(self.tenant_token)),
            web.post("/open-apis/auth/v3/app_access_token/internal", self.tenant_token),
            web.get("/open-apis/bot/v3/info", self.bot_info),
            web.post(base, self._send_faults(limited(self.create_message))),
            web.post(base + "/{message_id}/reply",
                     self._send_faults(limited(self.reply_message))),
            web.get(base + "/{message_id}", self.get_message),
            web.put(base + "/{message_id}", limited(self.update_message)),
            web.patch(base + "/{message_id}", limited(self.patch_message)),
            web.post(base + "/{message_id}/reactions", limited(self.add_reaction)),
            web.delete(base + "/{message_id}/reactions/{reaction_id}",
                       limited(self.delete_reaction)),
            *CardKitApi(self.apps, self.state).routes(limited),
            *ResourceApi(self.apps, self.state).routes(),
            *UploadApi(self.apps, self.state, self.state.uploads).routes(),
            *ListingApi(self.apps, self.state, self.faults, self.listing, self._item).routes(),
        ]

    def _limited(self, handler: Handler) -> Handler:
        return limit_sends(handler, self.apps, self.state)

    def _send_faults(self, handler: Handler) -> Handler:
        """Count the attempt per uuid, then fail before the handler runs, or (RESET) after
        it created the message: the connection is then aborted with no response at all."""
        async def faulty(request: web.Request) -> web.Response:
            uuid = await peek_uuid(request)
            if uuid is not None:
                self.state.bump(f"send-attempt:{uuid}")
            fault = self.faults.next_send(uuid)
            if fault is not None:
                self.state.bump(f"fault:{fault.kind}")
                if fault.kind != RESET:
                    return fault_response(fault)
            try:
                return await handler(request)
            finally:
                if fault is not None:
                    abort_connection(request)
        return faulty

    def _token_faults(self, handler: Handler) -> Handler:
        async def faulty(request: web.Request) -> web.Response:
            fault = self.faults.next_token()
            if fault is None:
                return await handler(request)
            self.state.bump(f"fault:token:{fault.kind}")
            return fault_response(fault)
        return faulty

    def _authorize(self, request: web.Request) -> SimConfig:
        """The app whose current tenant token the request carries, or ApiError 99991663."""
        return authorize(request, self.apps, self.state)

    def _known(self, message_id: str) -> MessageRecord:
        rec = self.state.get_message(message_id)
        if rec is None:
            if self.state.withdrawn(message_id):
                raise ApiError(c.CODE_MESSAGE_NOT_FOUND, "The message is recalled.")
            raise ApiError(c.CODE_MESSAGE_MISSING,
                           f"The message is not found, maybe not exist or deleted: {message_id}")
        return rec

    def _check_member(self, app: SimConfig, chat_id: str) -> None:
        """A bot removed from a chat sends nothing there (Feishu's 230002)."""
        if self.state.is_outside(app.app_id, chat_id):
            raise ApiError(c.CODE_BOT_NOT_IN_CHAT, "Bot is not in the chat. The bot can not "
                           "be outside the group.")

    def _bot_message(self, message_id: str, app: SimConfig) -> MessageRecord:
        rec = self._known(message_id)
        if not rec.from_bot or rec.app_id != app.app_id:
            raise ApiError(c.CODE_NO_PERMISSION, "Lack of necessary permissions: "
                           "the bot can only edit messages it sent")
        return rec

    def _object(self, rec: MessageRecord, user_id_type: str = "open_id",
                content: str | None = None) -> dict[str, Any]:
        return api_message_object(
            message_id=rec.message_id, chat_id=rec.chat_id, msg_type=rec.msg_type,
            content=rec.content if content is None else content,
            app_id=rec.app_id or self.apps.primary.app_id, create_time_ms=rec.create_time_ms,
            update_time_ms=rec.update_time_ms, root_id=rec.root_id, parent_id=rec.parent_id,
            thread_id=rec.thread_id, updated=rec.updated,
            sender_open_id=None if rec.from_bot else rec.sender_open_id or "ou_unknown",
            user_id_type=user_id_type, mentions=rec.mentions,
            upper_message_id=rec.upper_message_id,
        )

    async def tenant_token(self, request: web.Request) -> web.Response:
        body = await json_body(request)
        app = self.apps.find(body.get("app_id"))
        if app is None:
            raise ApiError(c.CODE_INVALID_PARAM, "invalid param: app_id not found")
        if body.get("app_secret") != app.app_secret:
            raise ApiError(c.CODE_BAD_SECRET, "app secret invalid")
        token = app.tenant_token(self.state.token_generation)
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token,
                                  "app_access_token": token, "expire": c.TOKEN_EXPIRE_S})

    async def bot_info(self, request: web.Request) -> web.Response:
        fault = self.faults.next_bot_info()
        if fault is not None:
            self.state.bump(f"fault:bot-info:{fault.kind}")
            return fault_response(fault)
        app = self._authorize(request)
        bot = {"open_id": app.bot_open_id, "app_name": app.app_name,
               "activate_status": 2, "avatar_url": "", "ip_white_list": []}
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    def _new_bot_message(self, app: SimConfig, body: dict[str, Any], chat_id: str,
                         **links: Any) -> MessageRecord:
        msg_type, content = require_str(body, "msg_type"), require_str(body, "content")
        refused = self.faults.rejection(msg_type)
        if refused is not None:
            self.state.bump(f"rejected:{msg_type}")
            raise ApiError(refused, "Your request contains an invalid request parameter, "
                           f"ext=invalid message content: {msg_type} is refused "
                           "(Simulator.reject_msg_types)")
        card_id = card_reference(msg_type, check_content(msg_type, content))
        uuid = body.get("uuid")
        created = now_ms()
        rec = MessageRecord(
            message_id=new_id("om_"), chat_id=chat_id, msg_type=msg_type, content=content,
            from_bot=True, create_time_ms=created, update_time_ms=created, at=time.time(),
            uuid=uuid if isinstance(uuid, str) and uuid else None, app_id=app.app_id,
            card_id=card_id, **links,
        )
        if card_id is not None and self.state.by_uuid(app.app_id, rec.uuid) is None:
            self.state.cards.check_sendable(card_id, app.app_id)
        if self.state.by_uuid(app.app_id, rec.uuid) is None:  # (its image or file: the app's)
            shown_upload(self.state, self.state.uploads, app.app_id, rec.message_id, msg_type,
                         check_content(msg_type, content))
        return rec

    def _store(self, rec: MessageRecord) -> tuple[MessageRecord, bool]:
        """Keep a new bot message, unless its app sent one with its uuid (then that one,
        False); a card entity it shows is sent from now on."""
        known = self.state.by_uuid(rec.app_id, rec.uuid)
        if known is not None:
            return known, False
        if rec.card_id is not None and rec.app_id is not None:
            self.state.cards.claim(rec.card_id, rec.app_id, rec.message_id)
        return self.state.add_bot_message(rec)

    def _p2p_chat(self, app: SimConfig, open_id: str) -> str:
        known = self.state.p2p_chat(app.app_id, open_id)
        if known is not None:
            return known
        made = f"oc_p2p_{open_id}" if app.app_id == self.apps.primary.app_id \
            else f"oc_p2p_{app.app_id}_{open_id}"
        self.state.remember_p2p_chat(app.app_id, open_id, made)  # (Feishu makes the chat)
        return made

    async def create_message(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        id_type = request.query.get("receive_id_type", "")
        if id_type not in RECEIVE_ID_TYPES:
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           f"field validation failed: receive_id_type={id_type!r}")
        body = await json_body(request)
        receive_id = require_str(body, "receive_id")
        chat_id = receive_id if id_type == "chat_id" else self._p2p_chat(app, receive_id)
        self._check_member(app, chat_id)
        rec, _ = self._store(self._new_bot_message(app, body, chat_id))
        return ok(self._object(rec))

    async def reply_message(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        body = await json_body(request)
        parent = self._known(request.match_info["message_id"])
        self._check_member(app, parent.chat_id)
        in_thread = body.get("reply_in_thread") is True
        thread_id = parent.thread_id
        if in_thread and thread_id is None:
            thread_id = new_id("omt_")
        rec = self._new_bot_message(
            app, body, parent.chat_id, root_id=parent.root_id or parent.message_id,
            parent_id=parent.message_id, thread_id=thread_id,
            in_thread=in_thread or parent.thread_id is not None,
        )
        rec, created = self._store(rec)
        if created and thread_id is not None and parent.thread_id is None:
            self.state.put_message(dataclasses.replace(parent, thread_id=thread_id))
        return ok(self._object(rec))

    async def get_message(self, request: web.Request) -> web.Response:
        """im/v1/message/get: data.items is the message, then (for a merge_forward) every
        message it carries, each with upper_message_id."""
        fault = self.faults.next_read(request.match_info["message_id"])
        if fault is not None:
            self.state.bump(f"fault:read:{fault.kind}")
            return fault_response(fault)
        self._authorize(request)
        id_type = request.query.get("user_id_type", "open_id")
        if id_type not in USER_ID_TYPES:
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           f"field validation failed: user_id_type={id_type!r}")
        rec = self._known(request.match_info["message_id"])
        recs = [rec, *self.state.children_of(rec.message_id)]
        return ok({"items": [self._item(r, id_type) for r in recs]})

    def _item(self, rec: MessageRecord, user_id_type: str) -> dict[str, Any]:
        card = self.state.cards.view(rec.card_id) if rec.card_id else None
        content = None if card is None else json.dumps(card.card, ensure_ascii=False)
        return self._object(rec, user_id_type, content)

    async def update_message(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        body = await json_body(request)
        msg_type, content = require_str(body, "msg_type"), require_str(body, "content")
        rec = self._bot_message(request.match_info["message_id"], app)
        if msg_type not in ("text", "post") or rec.msg_type not in ("text", "post"):
            raise ApiError(c.CODE_INVALID_MESSAGE, "only text and post messages can be updated")
        if len(rec.history) >= c.EDITS_MAX:
            raise ApiError(c.CODE_EDIT_LIMIT, f"invalid message: {rec.message_id} was edited "
                           f"{c.EDITS_MAX} times already")
        check_content(msg_type, content)
        new = self.state.edit_message(rec.message_id, msg_type, content)
        return ok(self._object(new or rec))

    async def patch_message(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        body = await json_body(request)
        content = require_str(body, "content")
        rec = self._bot_message(request.match_info["message_id"], app)
        if rec.msg_type != "interactive":
            raise ApiError(c.CODE_INVALID_MESSAGE, "the message is not an interactive card")
        check_content("interactive", content)
        new = self.state.edit_message(rec.message_id, "interactive", content)
        if new is not None and new.card_id is not None:  # it shows this JSON from now on
            self.state.put_message(dataclasses.replace(new, card_id=None))
        return ok({})

    def _reaction(self, app: SimConfig, reaction_id: str, emoji: str) -> dict[str, Any]:
        return {"reaction_id": reaction_id, "action_time": str(now_ms()),
                "operator": {"operator_id": app.app_id, "operator_type": "app"},
                "reaction_type": {"emoji_type": emoji}}

    async def add_reaction(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        body = await json_body(request)
        kind = body.get("reaction_type")
        emoji = kind.get("emoji_type") if isinstance(kind, dict) else None
        if not isinstance(emoji, str) or not emoji:
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           "field validation failed: reaction_type.emoji_type is required")
        rec = self._known(request.match_info["message_id"])
        reaction_id = new_id("rc_")
        self.state.add_reaction(rec.message_id, reaction_id, emoji)
        return ok(self._reaction(app, reaction_id, emoji))

    async def delete_reaction(self, request: web.Request) -> web.Response:
        app = self._authorize(request)
        rec = self._known(request.match_info["message_id"])
        reaction_id = request.match_info["reaction_id"]
        emoji = self.state.delete_reaction(rec.message_id, reaction_id)
        if emoji is None:
            raise ApiError(c.CODE_REACTION_NOT_FOUND, f"reaction not found: {reaction_id}")
        return ok(self._reaction(app, reaction_id, emoji))
