"""Forms a turn asks (`Turn.ask`): the form's spec as stored with its request, its card
(Feishu's card JSON 2.0 `form` container: input, select_static, multi_select_static,
date_picker, checker and a submit button), and the check of a submit against the fields.
Pure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from gateway.core.model import FIELD_KINDS, FormField, FormValue
from gateway.feishu.inbound.fields import clean_text

FORM_KEY = "form"
"""The `key` a form's request is stored under (approvals' ask.lua): never remembered."""
FIELDS_MAX = 20
OPTIONS_MAX = 50
TITLE_MAX_CHARS = 200
SUBMIT_MAX_BYTES = 16_384
"""A submit whose values are larger in all is refused."""
DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:$|[ T])", re.ASCII)
SUBMIT_NAME = "submit"
STATE_TITLES = {"submitted": "Form submitted", "expired": "Form expired",
                "stopped": "Form stopped"}


def form_spec(title: str, fields: Sequence[FormField]) -> str:
    """The form as stored with its request (JSON); ValueError for fields that make no
    form."""
    if not fields or len(fields) > FIELDS_MAX:
        raise ValueError(f"a form has 1 to {FIELDS_MAX} fields")
    seen: set[str] = set()
    out = []
    for f in fields:
        if not isinstance(f, FormField):
            raise ValueError(f"a form's fields are FormField values, not {type(f).__name__}")
        if not f.name or not f.name.isidentifier() or f.name in seen or f.name == SUBMIT_NAME:
            raise ValueError(f"field name {f.name!r}: a unique identifier (not 'submit')")
        seen.add(f.name)
        if f.kind not in FIELD_KINDS:
            raise ValueError(f"field {f.name}: kind must be one of {', '.join(FIELD_KINDS)}")
        if f.kind in ("select", "multi_select") and not (
                0 < len(f.options) <= OPTIONS_MAX and len(set(f.options)) == len(f.options)):
            raise ValueError(f"field {f.name}: a select has 1 to {OPTIONS_MAX} distinct "
                             "options")
        if not 1 <= f.max_chars <= 10_000:
            raise ValueError(f"field {f.name}: max_chars is 1 to 10000")
        out.append({"name": f.name, "label": f.label or f.name, "kind": f.kind,
                     "required": bool(f.required), "options": list(f.options),
                     "placeholder": f.placeholder, "max_chars": f.max_chars})
    return json.dumps({"title": (title or "Form")[:TITLE_MAX_CHARS], "fields": out},
                      ensure_ascii=False, separators=(",", ":"))


def read_spec(raw: str) -> dict[str, Any]:
    """A stored spec ({} when it is none)."""
    try:
        spec = json.loads(raw)
    except ValueError:
        return {}
    return spec if isinstance(spec, dict) and isinstance(spec.get("fields"), list) else {}


def check_submit(spec: Mapping[str, Any], form_value: Any) -> dict[str, FormValue] | str:
    """A submit's values, checked against the form's fields: the values kept (fields left
    empty are absent, names not in the form dropped), or why the submit is refused (the
    toast's text)."""
    if not isinstance(form_value, Mapping):
        form_value = {}
    form_value = {k: _clean(v) for k, v in form_value.items() if isinstance(k, str)}
    if len(json.dumps(form_value, ensure_ascii=False, default=str).encode()) > SUBMIT_MAX_BYTES:
        return "That is too much text for this form."
    values: dict[str, FormValue] = {}
    for f in spec.get("fields", []):
        name, label, kind = f["name"], f["label"], f["kind"]
        raw = form_value.get(name)
        if kind == "checkbox":
            ticked = raw is True or raw == "true"
            if f["required"] and not ticked:
                return f"Please tick: {label}"
            values[name] = ticked
            continue
        try:
            value = _value(f, raw)
        except _Refused as refused:
            return str(refused)
        if value is None:
            if f["required"]:
                return f"Please fill in: {label}"
            continue
        values[name] = value
    return values


class _Refused(ValueError):
    """A value a field does not take; its text says why (the toast)."""


def _clean(value: Any) -> Any:
    """A submitted value as text Redis can carry (a lone surrogate as U+FFFD)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_text(x) if isinstance(x, str) else x for x in value]
    return value


def _value(f: Mapping[str, Any], raw: Any) -> FormValue | None:
    """One field's value (None: left empty); _Refused when it is not one the field takes."""
    label, kind = f["label"], f["kind"]
    options = _Refused(f"Choose among the options for: {label}")
    if kind == "multi_select":
        chosen = raw if isinstance(raw, list) else [] if raw in (None, "") else None
        if chosen is None or not all(isinstance(x, str) and x in f["options"] for x in chosen):
            raise options
        return list(dict.fromkeys(chosen)) or None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if kind == "select":
        if raw not in f["options"]:
            raise options
        return str(raw)
    if kind == "date":
        match = DATE.match(raw.strip()) if isinstance(raw, str) else None
        if match is not None:
            try:
                return date.fromisoformat(match.group(1)).isoformat()
            except ValueError:  # (no such day)
                pass
        raise _Refused(f"Not a date: {label}")
    if not isinstance(raw, str):
        raise _Refused(f"Not a valid value for: {label}")
    if len(raw) > int(f["max_chars"]):
        raise _Refused(f"Too long (at most {f['max_chars']} characters): {label}")
    return raw.strip()


def _text(content: str) -> dict[str, str]:
    return {"tag": "plain_text", "content": content}


def _field(f: Mapping[str, Any]) -> list[dict[str, Any]]:
    name, label, kind = f["name"], f["label"], f["kind"]
    hint = _text(f["placeholder"] or label)
    options = [{"text": _text(o), "value": o} for o in f["options"]]
    common = {"name": name, "required": f["required"]}
    if kind == "text":
        return [{"tag": "input", **common, "label": _text(label), "label_position": "top",
                 "placeholder": hint, "max_length": f["max_chars"]}]
    if kind == "checkbox":
        return [{"tag": "checker", **common, "text": _text(label)}]
    head = {"tag": "markdown", "content": f"**{label}**" + (" *" if f["required"] else "")}
    tag = {"select": "select_static", "multi_select": "multi_select_static",
           "date": "date_picker"}[kind]
    element = {"tag": tag, **common, "placeholder": hint}
    if options:
        element["options"] = options
    return [head, element]


def _card(title: str, template: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": "2.0", "config": {"update_multi": True},
            "header": {"title": _text(title), "template": template},
            "body": {"elements": elements}}


def pending_form_card(request_id: str, spec: Mapping[str, Any], chat_id: str,
                      thread_id: str = "") -> dict[str, Any]:
    """The card asking: its fields in one form, and a submit button naming the request, the
    chat and the topic it was asked in."""
    bound = {"form_request": request_id, "chat_id": chat_id,
             **({"thread_id": thread_id} if thread_id else {})}
    submit = {"tag": "button", "name": SUBMIT_NAME, "text": _text("Submit"), "type": "primary",
              "form_action_type": "submit",
              "behaviors": [{"type": "callback", "value": bound}]}
    form = {"tag": "form", "name": "form",
            "elements": [e for f in spec.get("fields", []) for e in _field(f)] + [submit]}
    return _card(str(spec.get("title") or "Form"), "blue", [form])


def shown_value(value: FormValue) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value)
    return value


def resolved_form_card(spec: Mapping[str, Any], state: str, by: str,
                       values: Mapping[str, FormValue]) -> dict[str, Any]:
    """The card once submitted (`by`: who; its values listed) or ended (expired,
    stopped)."""
    title = str(spec.get("title") or "Form")
    if state != "submitted":
        return _card(title, "grey", [{"tag": "markdown", "content":
                                      f"**{STATE_TITLES.get(state, state)}**"}])
    lines = [{"tag": "div", "text": _text(f"{f['label']}: {shown_value(values[f['name']])}")}
             for f in spec.get("fields", []) if f["name"] in values]  # (plain: what was typed)
    who = f" by <at id={by}></at>" if by else ""
    return _card(title, "green", [*(lines or [{"tag": "div", "text": _text(
        "(nothing filled in)")}]), {"tag": "markdown", "content": f"**Submitted**{who}",
                                    "text_size": "notation"}])
