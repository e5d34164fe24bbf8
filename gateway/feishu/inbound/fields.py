"""Reading the fields of an event's JSON, one way everywhere. Pure: no I/O, no logging.

What an id must be (`usable_id`) and what text Redis can carry (`clean_text`) are decided
here once; a part that must be there raises MalformedEvent with the same words whatever
event it is of, a part that may be absent reads as empty (`mapping`, `text_field`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.core.errors import MalformedEvent


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` when it is an object, else an empty one (a part that may be absent)."""
    return value if isinstance(value, Mapping) else {}


def required_mapping(value: Any, where: str) -> Mapping[str, Any]:
    """`value`, an object that must be there (MalformedEvent naming `where`)."""
    if not isinstance(value, Mapping):
        raise MalformedEvent(f"event without an object at {where}")
    return value


def usable_id(value: object) -> bool:
    """Whether `value` can be an id the state keys, inbox entries and log lines are made
    of: a non-empty string, printable (no line break, no bidi control, no lone surrogate,
    which UTF-8, so Redis, cannot carry), and no '|' (the inbox entry's separator)."""
    return isinstance(value, str) and value.isprintable() and bool(value) and "|" not in value


def required_id(obj: Mapping[str, Any], key: str, where: str) -> str:
    """`obj[key]`, an id that must be there and be usable (MalformedEvent saying which)."""
    value = obj.get(key)
    if value is None or value == "":
        raise MalformedEvent(f"event without {where}.{key}")
    if not usable_id(value):
        raise MalformedEvent(f"event with an unusable {where}.{key} ({value!r:.40})")
    return str(value)


def clean_text(text: str) -> str:
    """`text` with each lone surrogate (JSON may escape one, "\\ud800"; UTF-8, so Redis,
    cannot carry it) as U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def text_field(value: object) -> str:
    """An optional field of an event as text Redis can carry ("" when absent)."""
    return clean_text(str(value or ""))
