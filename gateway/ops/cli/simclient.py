"""`feishu-gateway simulator send`: a user's message to a running simulator, and the bot's
replies to it (its HTTP user API, gateway/simulator/userapi.py).

With no reply in time it says what the simulator saw: whether the message was acknowledged
(by the listener: it took or refused it) and whether a turn started (the bot's reaction on
the message), and which rule most likely kept it unanswered."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.core.errors import GatewayError, Refused

QUIET_S = 1.5
"""A reply counts as complete when nothing of it changed for this long."""
POLL_S = 0.2
SEND_TIMEOUT_S = 30.0
"""The send answers once the message is delivered; with no bot connected, only after the
simulator's delivery timeout (10 s by default)."""
ACK_OK = 200
UNNAMED_S = 2.0
"""A group message sent without naming the bot, taken in with no turn started this long
after: the answer is known (mention gating), no need to wait out --wait."""
TYPING = "Typing"
"""The reaction a running turn shows on its message (FEISHU_TYPING_EMOJI's default)."""


@dataclass
class Seen:
    """What the simulator showed of one sent message so far."""

    replies: list[tuple[str, str]]
    ack_codes: list[int]
    reacted: bool = False
    writing: bool = False
    """A reply still grows: a card in streaming mode, or the "Typing" reaction (its turn
    runs) still on the message."""


@dataclass(frozen=True)
class Replies:
    """The bot's replies to a message, and whether they were still being written when the
    wait ran out (`unfinished`)."""

    texts: list[str]
    unfinished: bool = False


def send_and_wait(url: str, chat_id: str, text: str, *, group: bool = False,
                  mention: bool = False, wait_s: float = 30.0) -> Replies:
    """The bot's replies to the message, once they are complete: no card of them streams,
    its turn ended (no "Typing" reaction on it) and nothing changed for QUIET_S; or, the
    wait over, what they said so far, marked unfinished."""
    seen = Seen([], [])
    try:
        with httpx.Client(base_url=url.rstrip("/"), timeout=10) as http:
            sent = http.post("/sim/v1/messages", json={
                "chat_id": chat_id, "text": text, "chat_type": "group" if group else "p2p",
                "mention_bot": mention}, timeout=SEND_TIMEOUT_S)
            if sent.status_code == 503:  # nobody connected to take it
                raise Refused(f"not sent: {sent.text.strip()}")
            if sent.status_code != 200:
                raise GatewayError(f"the simulator refused the message: {sent.text.strip()}")
            message_id = sent.json()["message_id"]
            sent_at = time.monotonic()
            deadline = sent_at + wait_s
            changed = time.monotonic()
            while time.monotonic() < deadline:
                now = _look(http.get("/sim/v1/messages", params={"chat_id": chat_id}).json(),
                            message_id)
                seen.ack_codes, seen.reacted = now.ack_codes, seen.reacted or now.reacted
                seen.writing = now.writing
                if now.replies != seen.replies:
                    seen.replies, changed = now.replies, time.monotonic()
                elif seen.replies and not now.writing and time.monotonic() - changed >= QUIET_S:
                    break
                elif group and not mention and not seen.replies and not seen.reacted \
                        and ACK_OK in seen.ack_codes and time.monotonic() - sent_at > UNNAMED_S:
                    wait_s = UNNAMED_S  # (taken, no turn: mention gating, most likely)
                    break
                time.sleep(POLL_S)
    except (ValueError, KeyError, TypeError) as error:
        raise GatewayError(f"the simulator at {url} answered something else than its user "
                           f"API ({error})") from None
    except httpx.HTTPError as error:
        raise GatewayError(f"cannot reach the simulator at {url} ({error}); is "
                           "`feishu-gateway simulator` running?") from None
    if seen.replies:
        return Replies([text for _, text in seen.replies], unfinished=seen.writing)
    raise Refused(unanswered(seen, wait_s, group=group, mention=mention))


def _look(answer: dict[str, Any], message_id: str) -> Seen:
    """The replies to, the ACKs of and the reactions on one message, in a GET's answer."""
    items = [m for m in answer["items"] if m.get("reply_to") == message_id]
    mine: dict[str, Any] = next(
        (m for m in answer.get("user_messages", ()) if m["message_id"] == message_id), {})
    reactions = answer.get("reactions", {}).get(message_id) or []
    return Seen([(m["message_id"], m["text"]) for m in items],
                [int(c) for c in mine.get("ack_codes", ())], bool(reactions),
                any(m.get("streaming") for m in items) or TYPING in reactions)


def unanswered(seen: Seen, wait_s: float, *, group: bool, mention: bool) -> str:
    """Why no reply came, as far as the simulator can tell: the listener's ACK, the bot's
    reaction (a turn started) and how the message was sent."""
    within = f"within {wait_s:g}s"
    if not seen.ack_codes:
        return (f"delivered to a listener, which did not acknowledge it {within} (is it "
                "stuck? see its log)")
    if seen.ack_codes[-1] != ACK_OK:
        return (f"delivered, but the listener did not take it (its ACK said "
                f"{seen.ack_codes[-1]}; see its log)")
    if seen.reacted:
        return f"a turn started (the bot reacted to the message) but it sent no reply {within}"
    if group and not mention:
        return (f"delivered and acknowledged, but no turn started {within}: in a group the "
                "bot answers only when @mentioned (--mention) unless its listener runs with "
                "FEISHU_REQUIRE_MENTION=false")
    return (f"delivered and acknowledged, but no turn started {within}: the listener's rules "
            "refused it (FEISHU_DM_POLICY, FEISHU_GROUP_RULES, ...: its log says which) or no "
            "worker is running")
