"""The peers the gateway is measured against, on the real lark-oapi SDK's long connection:

- `python -m bench.clients naive`: the naive bot, replying inside the SDK's handler (as the
  single-process bots our users run today);
- `python -m bench.clients celery`: the Celery reply bot's listener, a task per message
  (bench/celery_bot.py replies);
- `python -m bench.clients noop`: the bare SDK with a no-op handler (the ACK floor).

Credentials and domain come from the gateway's settings (FEISHU_APP_ID, ... in the env).
"""

from __future__ import annotations

import json
import sys

import lark_oapi as lark
from lark_oapi.api.im.v1 import (
    P2ImMessageReceiveV1,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)

from gateway.core.settings import load_settings


def text_of(content: str | None) -> str:
    """A text message's text, as each peer reads it."""
    return str(json.loads(content or "{}").get("text", ""))


def main(kind: str) -> None:
    s = load_settings()
    secret = s.feishu_app_secret.get_secret_value()
    api = (lark.Client.builder().app_id(s.feishu_app_id).app_secret(secret)
           .domain(s.feishu_domain).log_level(lark.LogLevel.WARNING).build())

    def naive(data: P2ImMessageReceiveV1) -> None:
        message = data.event.message
        text = text_of(message.content)
        body = (ReplyMessageRequestBody.builder().msg_type("text")
                .content(json.dumps({"text": f"echo: {text}"}))
                .uuid(f"r-{message.message_id}").build())
        api.im.v1.message.reply(ReplyMessageRequest.builder()
                                .message_id(message.message_id)
                                .request_body(body).build())

    def celery(data: P2ImMessageReceiveV1) -> None:
        from bench.celery_bot import reply

        message = data.event.message
        reply.apply_async((message.message_id, text_of(message.content)))

    def noop(data: P2ImMessageReceiveV1) -> None:
        return None

    handlers = {"naive": naive, "celery": celery, "noop": noop}
    handler = (lark.EventDispatcherHandler.builder("", "")
               .register_p2_im_message_receive_v1(handlers[kind]).build())
    client = lark.ws.Client(s.feishu_app_id, secret, event_handler=handler,
                            domain=s.feishu_domain, log_level=lark.LogLevel.WARNING)
    print(f"{kind} client starting", flush=True)
    client.start()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "noop")
