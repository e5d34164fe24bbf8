"""`feishu-gateway simulator send`: a user's message to a running simulator, and the bot's
replies to it (its HTTP user API, gateway/simulator/userapi.py). May import: gateway.errors."""

from __future__ import annotations

import time

import httpx

from gateway.errors import GatewayError, Refused

QUIET_S = 1.5
"""A reply counts as complete when nothing of it changed for this long."""
POLL_S = 0.2


def send_and_wait(url: str, chat_id: str, text: str, *, group: bool = False,
                  mention: bool = False, wait_s: float = 30.0) -> list[str]:
    """The texts of the bot's replies to the message, once they stopped changing."""
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=10) as http:
            sent = http.post("/sim/v1/messages", json={
                "chat_id": chat_id, "text": text, "chat_type": "group" if group else "p2p",
                "mention_bot": mention})
            if sent.status_code != 200:
                raise GatewayError(f"the simulator refused the message: {sent.text.strip()}")
            message_id = sent.json()["message_id"]
            deadline = time.monotonic() + wait_s
            seen: list[tuple[str, str]] = []
            changed = time.monotonic()
            while time.monotonic() < deadline:
                items = http.get("/sim/v1/messages", params={"chat_id": chat_id}).json()
                now = [(m["message_id"], m["text"]) for m in items["items"]
                       if m.get("reply_to") == message_id]
                if now != seen:
                    seen, changed = now, time.monotonic()
                elif seen and time.monotonic() - changed >= QUIET_S:
                    return [text for _, text in seen]
                time.sleep(POLL_S)
    except (ValueError, KeyError, TypeError) as error:
        raise GatewayError(f"the simulator at {url} answered something else than its user "
                           f"API ({error})") from None
    except httpx.HTTPError as error:
        raise GatewayError(f"cannot reach the simulator at {url} ({error}); is "
                           "`feishu-gateway simulator` running?") from None
    if seen:
        return [text for _, text in seen]
    raise Refused(f"no reply to {message_id} within {wait_s:.0f}s (are a listener and a "
                  "worker connected to this simulator?)")
