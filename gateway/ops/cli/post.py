"""`feishu-gateway send`: a message the bot starts in a chat, or in one of its threads
(gateway/chats/outbound.py). It is queued in the chat's order and sent by a worker, through
the quota, retries and uuids of every reply; the same idempotency key posts once."""

from __future__ import annotations

import dataclasses
import json
import sys
import uuid
from pathlib import Path
from typing import Any

import click

from gateway.core.errors import Refused
from gateway.core.settings import load_settings
from gateway.ops.cli.context import Ops


def _card(path: str) -> dict[str, Any]:
    """A card's JSON from a file (`-`: standard input); Refused with one line otherwise."""
    try:
        raw = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise Refused(f"card {path}: {error.strerror or error}") from None
    try:
        card = json.loads(raw)
    except ValueError as error:
        raise Refused(f"card {path} is not JSON: {error}") from None
    if not isinstance(card, dict):
        raise Refused(f"card {path} is not a JSON object")
    return card


@click.command("send")
@click.argument("chat_id")
@click.argument("text", required=False, default="")
@click.option("--thread", "thread_id", default="", metavar="THREAD_ID",
              help="Post in this thread (topic) of the chat, as a reply in the thread.")
@click.option("--card", "card_path", default="", metavar="FILE",
              help="Send this card's JSON (a file; - for standard input) instead of TEXT.")
@click.option("--image", "image_path", default="", metavar="FILE",
              help="Send this image (PNG, JPEG, GIF, WEBP…, at most 10 MB) instead of TEXT.")
@click.option("--file", "file_path", default="", metavar="FILE",
              help="Send this file (at most 30 MB) instead of TEXT.")
@click.option("--key", default="", metavar="KEY",
              help="Idempotency key: the same key posts once (default: a new one).")
@click.option("--app", default="", metavar="APP_ID",
              help="With several apps (FEISHU_APPS): the bot that posts (default: the first).")
def send(chat_id: str, text: str, thread_id: str, card_path: str, image_path: str,
         file_path: str, key: str, app: str) -> None:
    """Post TEXT (markdown, sent as replies are), a card, an image or a file to CHAT_ID as
    the bot.

    It is queued behind what the chat (or the thread's topic) is answering and sent by a
    worker; run again with the same --key, it posts nothing more. Prints where it stands.
    Reads REDIS_URL and the broker's settings; a worker sends it."""
    from gateway.chats.outbound import Outbound, outbound_message, post
    from gateway.core.media import BadMedia
    from gateway.worker.media_sender import upload_at

    o = Ops(load_settings())
    apps = [a for a, _ in o.settings.apps]
    if app and app not in apps:
        raise Refused(f"app {app} is not one of FEISHU_APPS ({', '.join(apps)})")
    out = Outbound(chat_id, key or uuid.uuid4().hex, text=text,
                   card=_card(card_path) if card_path else None, thread_id=thread_id,
                   app_id="" if app in ("", o.settings.primary_app_id) else app,
                   media="-" if image_path or file_path else "")
    outbound_message(out, max_text_chars=o.settings.max_text_chars)  # (checked before all)
    o.require_workers()
    if thread_id:  # (one clear line now for a thread that is gone, not a failed send later)
        o.runtime.replies.thread_root(thread_id, app_id=out.app_id)
    if image_path or file_path:  # uploaded now: the queued message holds its key, no bytes
        try:
            piece = upload_at(o.runtime.replies, out.app_id, image_path, file_path)
        except BadMedia as error:
            raise Refused(str(error)) from None
        out = dataclasses.replace(out, media=piece)
    posted = post(o.store, o.runtime.publisher.publish, out,
                  sender_app=app or o.settings.primary_app_id,
                  max_text_chars=o.settings.max_text_chars)
    click.echo(posted.describe())
    if posted.outcome in ("full", "left", "late", "withdrawn"):
        raise Refused(posted.describe())
