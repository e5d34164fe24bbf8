"""The gateway's errors: one base class, named by what the caller should do."""

from __future__ import annotations


class GatewayError(Exception):
    """Base class of every error the gateway raises on purpose."""


class SettingsError(GatewayError):
    """A setting is missing or malformed; start-up stops with this one line."""


class MalformedEvent(GatewayError):
    """A Feishu event that cannot become a message; it is logged and dropped."""


class RetryableError(GatewayError):
    """A transient failure (network, rate limit): trying again may succeed."""


class RejectedError(GatewayError):
    """A permanent failure: trying again cannot succeed."""


class StaleFence(GatewayError):
    """This turn no longer holds its chat's lease; it must not act."""
