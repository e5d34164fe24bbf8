"""What a push must pass before its event is taken, as pure functions: the body is JSON (the
plaintext of `{"encrypt": …}` when the app has an Encrypt Key), its verification token is the
app's, its signature is Feishu's and its timestamp is recent. A URL verification (the
`challenge` Feishu sends when the request URL is saved) is answered by its token alone, as
Feishu does not sign it.

Each failure is a `PushRefused` whose message is one line for the log (never a secret, never
the body); the server answers it with 401."""

from __future__ import annotations

import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import GatewayError
from gateway.feishu.webhook.crypto import Undecryptable, decrypt, signature_ok

TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"
SIGNATURE_HEADER = "X-Lark-Signature"
URL_VERIFICATION = "url_verification"
CARD_CALLBACK = "card.action.trigger"


class PushRefused(GatewayError):
    """A push that is not Feishu's, or not for this app, or too old: answered 401."""


@dataclass(frozen=True)
class Keys:
    """The app's webhook secrets and the replay window (`max_age_s`, 0: not checked)."""

    verification_token: str
    encrypt_key: str = ""
    max_age_s: float = 300.0


@dataclass(frozen=True)
class Signed:
    """The signature headers of a push ('' when absent)."""

    timestamp: str = ""
    nonce: str = ""
    signature: str = ""

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Signed:
        """From a case-insensitive header mapping (aiohttp's)."""
        return cls(headers.get(TIMESTAMP_HEADER, ""), headers.get(NONCE_HEADER, ""),
                   headers.get(SIGNATURE_HEADER, ""))


@dataclass(frozen=True)
class Challenge:
    """A URL verification: answer `{"challenge": challenge}`."""

    challenge: str


@dataclass(frozen=True)
class Event:
    """A genuine push: its plaintext JSON and what it says."""

    payload: bytes
    event: Mapping[str, Any]

    @property
    def app_id(self) -> str:
        header = self.event.get("header")
        return str(header.get("app_id") or "") if isinstance(header, dict) else ""

    @property
    def is_callback(self) -> bool:
        """A card callback (a click), which Feishu wants answered within 3 s."""
        header = self.event.get("header")
        kind = header.get("event_type") if isinstance(header, dict) else self.event.get("type")
        return kind == CARD_CALLBACK


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise PushRefused(f"{what} is not JSON") from None
    if not isinstance(value, dict):
        raise PushRefused(f"{what} is not a JSON object")
    return value


def token_of(event: Mapping[str, Any]) -> str:
    """The verification token a push carries: schema 2.0 in `header.token`, URL
    verifications and schema 1.0 at the top."""
    header = event.get("header")
    token = header.get("token") if isinstance(header, dict) else event.get("token")
    return token if isinstance(token, str) else ""


def plaintext(body: bytes, keys: Keys) -> bytes:
    """The body, decrypted when it is `{"encrypt": …}`. An app with an Encrypt Key gets
    every push encrypted: a plain one is refused."""
    outer = _json_object(body, "the body")
    encrypted = outer.get("encrypt")
    if encrypted is None:
        if keys.encrypt_key:
            raise PushRefused("a plain body, but FEISHU_ENCRYPT_KEY is set (Feishu encrypts "
                              "every push of such an app)")
        return body
    if not keys.encrypt_key:
        raise PushRefused("an encrypted body, and FEISHU_ENCRYPT_KEY is not set")
    if not isinstance(encrypted, str):
        raise PushRefused("`encrypt` is not a string")
    try:
        return decrypt(encrypted, keys.encrypt_key)
    except Undecryptable as error:
        raise PushRefused(f"{error} (is FEISHU_ENCRYPT_KEY the app's Encrypt Key?)") from None


def check_fresh(timestamp: str, max_age_s: float, now_s: float) -> None:
    """Refuse a push whose timestamp (epoch seconds, Feishu's clock) is more than
    `max_age_s` away from `now_s`, either way (0: no check)."""
    if max_age_s <= 0:
        return
    try:
        sent_s = float(timestamp)
    except ValueError:
        sent_s = math.nan
    if not math.isfinite(sent_s):
        raise PushRefused(f"{TIMESTAMP_HEADER} is not a number")
    if abs(now_s - sent_s) > max_age_s:
        raise PushRefused(f"a push {now_s - sent_s:.0f}s old (FEISHU_WEBHOOK_MAX_AGE_S="
                          f"{max_age_s:g}): a replay, or a clock far off")


def open_push(body: bytes, signed: Signed, keys: Keys, now_s: float) -> Challenge | Event:
    """The push, checked: a Challenge or an Event; PushRefused says why not. A signed push
    is checked before anything is decrypted (a stranger's body costs one hash)."""
    headed = bool(signed.timestamp and signed.nonce and signed.signature)
    if keys.encrypt_key and headed and not signature_ok(
            signed.signature, signed.timestamp, signed.nonce, keys.encrypt_key, body):
        raise PushRefused(f"wrong {SIGNATURE_HEADER}")
    inner = plaintext(body, keys)
    event = _json_object(inner, "the decrypted body")
    given = token_of(event)
    if not hmac.compare_digest(given.encode("utf-8", "replace"),
                               keys.verification_token.encode("utf-8")):
        raise PushRefused("wrong verification token (FEISHU_VERIFICATION_TOKEN)")
    if event.get("type") == URL_VERIFICATION:
        challenge = event.get("challenge")
        if not isinstance(challenge, str):
            raise PushRefused("a URL verification without a challenge")
        return Challenge(challenge)
    if keys.encrypt_key and not headed:  # (checked above when it came)
        raise PushRefused(f"no {SIGNATURE_HEADER} (with its timestamp and nonce)")
    if signed.timestamp:
        check_fresh(signed.timestamp, keys.max_age_s, now_s)
    return Event(inner, event)
