"""The checks a push must pass (gateway/feishu/webhook/): decryption with Feishu's own
documented example, the signature, the token, URL verification and the replay window."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping

import pytest
from Crypto.Cipher import AES

from gateway.feishu.webhook.crypto import Undecryptable, decrypt, signature, signature_ok
from gateway.feishu.webhook.verify import (
    Challenge,
    Event,
    Keys,
    PushRefused,
    Signed,
    check_fresh,
    open_push,
)

KEY = "an encrypt key"
TOKEN = "v-token"
NOW_S = 1_700_000_000.0


def encrypt(plain: bytes, key: str) -> str:
    """As Feishu encrypts a push: AES-256-CBC, key SHA-256(key), a random IV first, PKCS7."""
    iv = os.urandom(16)
    pad = 16 - len(plain) % 16
    cipher = AES.new(hashlib.sha256(key.encode()).digest(), AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(plain + bytes([pad]) * pad)).decode()


def event(token: str = TOKEN, **header: str) -> dict[str, object]:
    return {"schema": "2.0", "header": {"event_id": "e1", "event_type": "im.message.receive_v1",
                                       "token": token, "app_id": "cli_a", **header},
            "event": {}}


def pushed(payload: Mapping[str, object], key: str = KEY, *, at_s: float = NOW_S,
           sign_key: str | None = None) -> tuple[bytes, Signed]:
    body = json.dumps({"encrypt": encrypt(json.dumps(payload).encode(), key)}).encode()
    ts, nonce = str(int(at_s)), "n0nce"
    return body, Signed(ts, nonce, signature(ts, nonce, sign_key or key, body))


def test_decrypts_feishus_documented_example() -> None:
    assert decrypt("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key") == b"hello world"


@pytest.mark.parametrize("bad", ["not base64!", base64.b64encode(b"short").decode(),
                                 encrypt(b"hello", "another key")],
                         ids=["not-base64", "too-short", "another-key"])  # the IV is random
def test_what_the_key_does_not_open_is_undecryptable(bad: str) -> None:
    with pytest.raises(Undecryptable):
        decrypt(bad, KEY)


def test_signature_is_sha256_of_timestamp_nonce_key_and_body() -> None:
    body = b'{"encrypt":"x"}'
    expected = hashlib.sha256(b"1700000000" + b"nonce" + KEY.encode() + body).hexdigest()
    assert signature("1700000000", "nonce", KEY, body) == expected
    assert signature_ok(expected.upper(), "1700000000", "nonce", KEY, body)
    assert not signature_ok(expected, "1700000001", "nonce", KEY, body)


def test_an_encrypted_signed_push_opens() -> None:
    body, signed = pushed(event())
    opened = open_push(body, signed, Keys(TOKEN, KEY), NOW_S + 5)
    assert isinstance(opened, Event)
    assert opened.app_id == "cli_a" and json.loads(opened.payload)["header"]["event_id"] == "e1"


def test_url_verification_answers_its_challenge_by_its_token() -> None:
    challenge = {"type": "url_verification", "challenge": "c-1", "token": TOKEN}
    body, _ = pushed(challenge)
    assert open_push(body, Signed(), Keys(TOKEN, KEY), NOW_S) == Challenge("c-1")
    plain = json.dumps(challenge).encode()
    assert open_push(plain, Signed(), Keys(TOKEN), NOW_S) == Challenge("c-1")
    with pytest.raises(PushRefused, match="token"):
        open_push(plain, Signed(), Keys("another"), NOW_S)


@pytest.mark.parametrize(("case", "why"), [
    ("token", "verification token"), ("signature", "X-Lark-Signature"),
    ("unsigned", "no X-Lark-Signature"), ("key", "cannot decrypt"), ("plain", "plain body"),
    ("old", "old"), ("future", "old"), ("not-json", "not JSON")])
def test_refusals_say_why_in_one_line(case: str, why: str) -> None:
    body, signed = pushed(event("wrong" if case == "token" else TOKEN),
                          "another key" if case == "key" else KEY,
                          at_s=NOW_S - 301 if case == "old" else
                          NOW_S + 400 if case == "future" else NOW_S,
                          sign_key="another key" if case == "signature" else
                          KEY if case == "key" else None)
    if case == "unsigned":
        signed = Signed()
    if case in ("plain", "not-json"):  # signed right: refused for what it holds
        body = json.dumps(event()).encode() if case == "plain" else b"{nope"
        signed = Signed(signed.timestamp, signed.nonce,
                        signature(signed.timestamp, signed.nonce, KEY, body))
    with pytest.raises(PushRefused, match=why) as refused:
        open_push(body, signed, Keys(TOKEN, KEY, max_age_s=300), NOW_S)
    assert "\n" not in str(refused.value) and KEY not in str(refused.value)


def test_a_wrong_signature_is_refused_before_anything_is_decrypted() -> None:
    body, signed = pushed(event(), "another key", sign_key=KEY + "x")
    with pytest.raises(PushRefused, match="wrong X-Lark-Signature"):  # not "cannot decrypt"
        open_push(body, signed, Keys(TOKEN, KEY), NOW_S)
    with pytest.raises(PushRefused, match="not a number"):
        check_fresh("nan", 300, NOW_S)


def test_without_an_encrypt_key_the_token_guards_and_an_encrypted_body_is_refused() -> None:
    plain = json.dumps(event()).encode()
    assert isinstance(open_push(plain, Signed(), Keys(TOKEN), NOW_S), Event)
    body, signed = pushed(event())
    with pytest.raises(PushRefused, match="FEISHU_ENCRYPT_KEY is not set"):
        open_push(body, signed, Keys(TOKEN), NOW_S)


def test_the_replay_window_is_both_ways_and_zero_turns_it_off() -> None:
    check_fresh(str(int(NOW_S - 300)), 300, NOW_S)
    check_fresh(str(int(NOW_S + 300)), 300, NOW_S)
    for off in (-301, 301):
        with pytest.raises(PushRefused):
            check_fresh(str(int(NOW_S + off)), 300, NOW_S)
    check_fresh(str(int(NOW_S - 86_400)), 0, NOW_S)
    with pytest.raises(PushRefused, match="not a number"):
        check_fresh("yesterday", 300, NOW_S)
