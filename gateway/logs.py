"""Logging set-up, and a filter that keeps connection secrets out of every log line."""

from __future__ import annotations

import logging
import re

_SECRET_QUERY = re.compile(r"((?:access_key|ticket|app_secret|token)=)[^&\s'\"]+", re.I)
_PASSWORD_QUERY = re.compile(r"([?&](?:password|passwd|pwd)=)[^&#\s]*", re.I)


def masked_url(url: str) -> str:
    """A URL fit for a log line: any password (user info or query) replaced by ***."""
    return _PASSWORD_QUERY.sub(r"\1***", re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url))


class RedactSecrets(logging.Filter):
    """Masks secrets carried in URLs (the long-connection URL has access_key and ticket)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRET_QUERY.sub(r"\1***", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def redact_handlers(logger: logging.Logger) -> None:
    """Add the redaction filter to every handler of `logger` (e.g. Celery's own)."""
    for handler in logger.handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def quiet_lark_handler() -> None:
    """The SDK prints through its own stdout handler; route it through ours instead. httpx
    logs every request at INFO: only its warnings reach the operator."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    import lark_oapi.core.log  # noqa: F401  (adds the SDK's handler: import it before clearing)

    lark_logger = logging.getLogger("Lark")
    lark_logger.handlers.clear()
    if not any(isinstance(f, RedactSecrets) for f in lark_logger.filters):
        lark_logger.addFilter(RedactSecrets())


def setup_logging(level: str = "INFO") -> None:
    """Plain one-line records on stderr; the lark SDK's own logger redacted too."""
    root = logging.getLogger()
    if not any(isinstance(f, RedactSecrets) for h in root.handlers for f in h.filters):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(RedactSecrets())
        root.addHandler(handler)
    root.setLevel(level)
    quiet_lark_handler()
