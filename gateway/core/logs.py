"""Logging set-up: one line a record, JSON when stderr is not a terminal (key=value on one),
the turn a line concerns (chat, message, turn id, fence) on every line logged while it runs,
and a filter that keeps connection secrets out of every line."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

_SECRET_KEY = r"(?:access_key|ticket|app_?secret|token|authorization)"
_SECRET = re.compile(
    # key=value (a URL's query, key=value text), "key": value as in JSON or a dict's repr
    # (its quotes escaped too, JSON inside JSON), or an HTTP header `Authorization: …`; a
    # quoted value is masked up to its closing quote, a bare one (a number, null) up to &,
    # a quote, a space, "," or "}". An auth scheme (Bearer, Basic) before it stays.
    rf"({_SECRET_KEY}=|{_SECRET_KEY}\\?[\"']\s*:\s*|authorization:\s*)(\\?[\"'])?"
    r"((?:bearer|basic)\s+)?(?(2)(?:(?!\2).)*|[^&\s'\",}]+)", re.I)
_PASSWORD_QUERY = re.compile(r"([?&](?:password|passwd|pwd)=)[^&#\s]*", re.I)


def masked_url(url: str) -> str:
    """A URL fit for a log line: any password (user info or query) replaced by ***."""
    return _PASSWORD_QUERY.sub(r"\1***", re.sub(r"(//[^:/@]*:)[^@/]*@", r"\1***@", url))


def redact(text: str) -> str:
    """`text` with the value of every access_key, ticket, app_secret (AppSecret), token or
    authorization replaced by *** (`key=…`, `"key": "…"`, `Authorization: Bearer …`)."""
    return _SECRET.sub(lambda m: f"{m[1]}{m[2] or ''}{m[3] or ''}***", text)


class Tally:
    """What happens often, counted and logged at most every `every_s` (thread-safe):
    `note(message, *args)` logs `message % (how many since the line before, *args)`."""

    def __init__(self, log: logging.Logger, level: int = logging.WARNING,
                 every_s: float = 5.0) -> None:
        self._log, self._level, self.every_s = log, level, every_s
        self._since = 0
        self._at = float("-inf")
        self._lock = threading.Lock()

    def note(self, message: str, *args: object, count: int = 1) -> None:
        with self._lock:
            self._since += count
            now = time.monotonic()
            if now - self._at < self.every_s:
                return
            total, self._since, self._at = self._since, 0, now
        self._log.log(self._level, message, total, *args)


SHOWN_MAX_CHARS = 100


def shown(value: object, max_chars: int = SHOWN_MAX_CHARS) -> str:
    """A value from outside (an event's ids, its sender type) fit for a log line: what
    would not print (a line break, a bidi override, a lone surrogate) escaped as Python
    writes it, so no event can forge or break a line, and cut to `max_chars`."""
    text = str(value)
    if not text.isprintable() or "\\" in text:  # (a backslash too: "\\n" is no line break)
        text = "".join(c if c.isprintable() and c != "\\" else ascii(c)[1:-1] for c in text)
    return text if len(text) <= max_chars else f"{text[:max_chars]}…"


_PLAIN = logging.Formatter()


class RedactSecrets(logging.Filter):
    """Masks secrets carried in URLs (the long-connection URL has access_key and ticket),
    JSON bodies or an Authorization header: in the message, the exception's text and the
    stack, whatever formatter the handler has (the exception is formatted here, redacted,
    into record.exc_text, which logging.Formatter prints instead of formatting it again)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _PLAIN.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def redact_handlers(logger: logging.Logger) -> None:
    """Add the redaction filter to every handler of `logger` (e.g. Celery's own)."""
    for handler in logger.handlers:
        if not any(isinstance(f, RedactSecrets) for f in handler.filters):
            handler.addFilter(RedactSecrets())


def quiet_lark_handler() -> None:
    """The SDK prints through its own stdout handler, added when the SDK loads; route its
    records through ours instead, redacted. The SDK is not loaded for this (a worker never
    needs it): call this again once it may have loaded (the listener at its start, a worker
    once its agent's module is imported). httpx logs every request at INFO: only its
    warnings reach the operator."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    lark_logger = logging.getLogger("Lark")
    if "lark_oapi.core.log" in sys.modules:
        lark_logger.handlers.clear()
    if not any(isinstance(f, RedactSecrets) for f in lark_logger.filters):
        lark_logger.addFilter(RedactSecrets())


TURN_FIELDS = ("chat_id", "message_id", "turn_id", "fence")
_turn: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("turn",
                                                                            default=None)


@contextlib.contextmanager
def turn_context(chat_id: str, message_id: str = "", turn_id: str = "",
                 fence: int | str = "") -> Iterator[None]:
    """Every line logged inside (in this thread) carries the turn's ids."""
    token = _turn.set({"chat_id": chat_id, "message_id": message_id, "turn_id": turn_id,
                       "fence": str(fence)})
    try:
        yield
    finally:
        _turn.reset(token)


class TurnFields(logging.Filter):
    """Puts the current turn's ids (`turn_context`) on the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_turn.get() or {}).items():
            if value and not getattr(record, key, None):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, the turn's ids when known, exc,
    stack; msg, exc and stack redacted (with or without the filter)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name,
            "msg": redact(record.getMessage())}
        for key in TURN_FIELDS:
            value = getattr(record, key, None)
            if value:
                line[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = redact(record.exc_text)
        if record.stack_info:
            line["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(line, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """The classic line, then `chat=… message=… turn=… fence=…` when a turn is known; the
    whole text (traceback and stack included) redacted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = redact(super().format(record))
        fields = " ".join(f"{key.removesuffix('_id')}={value}" for key in TURN_FIELDS
                          if (value := getattr(record, key, None)))
        if not fields:
            return text
        first, newline, rest = text.partition("\n")
        return f"{first} [{fields}]{newline}{rest}"


def formatter_for(log_format: str, stream: Any = None) -> logging.Formatter:
    """`json`, `text`, or `auto`: JSON unless `stream` (stderr) is a terminal."""
    if log_format == "auto":
        tty = getattr(stream or sys.stderr, "isatty", lambda: False)()
        log_format = "text" if tty else "json"
    return JsonFormatter() if log_format == "json" else KeyValueFormatter()


def dress_handlers(logger: logging.Logger, log_format: str) -> None:
    """Our formatter, the turn's fields and the redaction on every handler of `logger`
    (the root's, or Celery's own)."""
    for handler in logger.handlers:
        handler.setFormatter(formatter_for(log_format, getattr(handler, "stream", None)))
        if not any(isinstance(f, TurnFields) for f in handler.filters):
            handler.addFilter(TurnFields())
    redact_handlers(logger)


def setup_logging(level: str = "INFO", log_format: str = "auto") -> None:
    """One-line records on stderr; the lark SDK's own logger redacted too."""
    root = logging.getLogger()
    if not any(isinstance(f, RedactSecrets) for h in root.handlers for f in h.filters):
        root.addHandler(logging.StreamHandler())
    dress_handlers(root, log_format)
    root.setLevel(level)
    quiet_lark_handler()


def default_worker_log_level(level: Callable[[], str]) -> None:
    """Make `level()` (GATEWAY_LOG_LEVEL) the default of `celery … worker`'s -l/--loglevel:
    Celery's own, WARNING, would hide the worker's ready line and its line per turn. An
    operator's -l still wins. Call it while Celery's command line loads the app (`-A
    tasks`), before the worker command reads its options; in any other process (a listener,
    the CLI, a worker started from code) it does nothing."""
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.invoked_subcommand != "worker" or not isinstance(ctx.command,
                                                                           click.Group):
        return
    worker = ctx.command.commands.get("worker")
    if worker is None or not any(p.name == "loglevel" for p in worker.params):
        return
    defaults = dict(ctx.default_map or {})
    defaults["worker"] = {"loglevel": level(), **defaults.get("worker", {})}
    ctx.default_map = defaults
