"""The crypto of Feishu's pushes: the body of an app with an Encrypt Key is AES-256-CBC
encrypted (key = SHA-256 of the Encrypt Key, IV = the first 16 bytes of the base64-decoded
body, PKCS7 padding), and signed in the header `X-Lark-Signature` = hex SHA-256 of
timestamp + nonce + Encrypt Key + the raw body.

Decryption is the Feishu SDK's own (lark_oapi's AESCipher, which checks the length and the
padding); the signature is one hash, compared in constant time."""

from __future__ import annotations

import binascii
import hashlib
import hmac

from gateway.core.errors import GatewayError


class Undecryptable(GatewayError):
    """A body that the Encrypt Key does not open (wrong key, not base64, bad padding, not
    UTF-8)."""


def decrypt(encrypted: str, encrypt_key: str) -> bytes:
    """The plaintext of an `{"encrypt": …}` body's value; Undecryptable when it is not one."""
    from lark_oapi.core.utils.decryptor import AESCipher  # (the SDK loads in ~1 s: lazily)

    try:
        text: str = AESCipher(encrypt_key).decrypt_str(encrypted)
        return text.encode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError) as error:
        raise Undecryptable(f"cannot decrypt the body ({type(error).__name__})") from None


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Feishu's `X-Lark-Signature` of a push."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def signature_ok(given: str, timestamp: str, nonce: str, encrypt_key: str,
                 body: bytes) -> bool:
    """Whether `given` is the push's signature (constant-time comparison)."""
    expected = signature(timestamp, nonce, encrypt_key, body)
    return hmac.compare_digest(given.strip().lower().encode("ascii", "replace"),
                               expected.encode("ascii"))


def warm() -> None:
    """Load the SDK's cipher now (at start), not on the first encrypted push."""
    from lark_oapi.core.utils.decryptor import AESCipher  # noqa: F401
