"""The gateway's errors: one base class, named by what the caller should do."""

from __future__ import annotations


class GatewayError(Exception):
    """Base class of every error the gateway raises on purpose."""


class SettingsError(GatewayError):
    """A setting is missing or malformed; start-up stops with this one line."""


class MalformedEvent(GatewayError):
    """A Feishu event that cannot become a message; it is logged and dropped."""


class RetryableError(GatewayError):
    """A transient failure (network, 5xx, an unreadable answer): trying again may succeed."""

    def __init__(self, detail: str, *, code: int | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.retry_after_s = retry_after_s


class TakeLater(RetryableError):
    """An event its listener could not take now (Redis failed, the broker is not taking
    turns, the bot's identity is not known yet): its ACK says 500, and the listener keeps it
    to take with a later step, in its chat's order (Feishu's delivery of it again is then a
    duplicate)."""


class RateLimited(RetryableError):
    """Feishu's frequency control said wait (HTTP 429, code 99991400, ...)."""


class Yielded(GatewayError):
    """A cosmetic call (a streaming update, a reaction) skipped: replies are waiting for the
    send quota, and they go first."""


class RejectedError(GatewayError):
    """A permanent failure: trying again cannot succeed (Feishu said why in `code`)."""

    def __init__(self, detail: str, *, code: int | None = None) -> None:
        super().__init__(detail)
        self.code = code


class TooLarge(RejectedError):
    """An attachment is bigger than FEISHU_FETCH_MAX_BYTES allows."""


class CredentialsRefused(RejectedError):
    """Feishu refused the app's id or secret."""


class Refused(GatewayError):
    """An operator's request that cannot be done as asked (an unknown chat, a turn that is
    over, nothing to retry); the CLI says why in one line and exits 1."""
