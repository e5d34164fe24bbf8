"""A form's spec and the check of a submit against its fields (pure)."""

from __future__ import annotations

import pytest

from gateway.approvals.forms import (
    check_submit,
    form_spec,
    pending_form_card,
    read_spec,
    resolved_form_card,
)
from gateway.core.model import FormField

FIELDS = (FormField("name", "Name", required=True, max_chars=5),
          FormField("size", "Size", "select", options=("s", "m")),
          FormField("ok", "Agree", "checkbox", required=True),
          FormField("when", "When", "date"))
SPEC = read_spec(form_spec("T", FIELDS))


def test_values_are_kept_typed_and_what_is_empty_or_unknown_is_left_out() -> None:
    assert check_submit(SPEC, {"name": " Ann ", "size": "", "ok": True, "when":
                               "2026-01-02 +0800", "other": "x"}) == {
        "name": "Ann", "ok": True, "when": "2026-01-02"}


@pytest.mark.parametrize(("values", "why"), [
    ({"ok": True}, "Please fill in: Name"), ({"name": "A"}, "Please tick: Agree"),
    ({"name": "A", "ok": True, "size": "xl"}, "Choose among the options for: Size"),
    ({"name": "A" * 6, "ok": True}, "Too long (at most 5 characters): Name"),
    ({"name": 3, "ok": True}, "Not a valid value for: Name"),
    ({"name": "A", "ok": True, "when": "soon"}, "Not a date: When"),
    ("not an object", "Please fill in: Name")])
def test_a_submit_that_does_not_fit_says_why(values: object, why: str) -> None:
    assert check_submit(SPEC, values) == why


@pytest.mark.parametrize("fields", [
    (), (FormField("a", "A"), FormField("a", "B")), (FormField("submit", "S"),),
    (FormField("a b", "A"),), (FormField("a", "A", "colour"),),
    (FormField("a", "A", "select"),), (FormField("a", "A", "select", options=("x", "x")),),
    tuple(FormField(f"f{n}", "F") for n in range(21))])
def test_fields_that_make_no_form_are_the_agents_error(fields: tuple[FormField, ...]) -> None:
    with pytest.raises(ValueError):
        form_spec("T", fields)


def test_the_cards_name_the_request_and_show_the_values() -> None:
    card = pending_form_card("req1", SPEC, "oc_1", "omt_1")
    form = card["body"]["elements"][0]
    assert form["tag"] == "form"
    assert form["elements"][-1]["behaviors"][0]["value"] == {
        "form_request": "req1", "chat_id": "oc_1", "thread_id": "omt_1"}
    done = str(resolved_form_card(SPEC, "submitted", "ou_a", {"name": "Ann", "ok": True}))
    assert "Name: Ann" in done and "Agree: yes" in done and "ou_a" in done
    assert "Form expired" in str(resolved_form_card(SPEC, "expired", "", {}))


def test_dates_are_real_ascii_dates_and_text_is_what_redis_can_carry() -> None:
    spec = read_spec(form_spec("T", (FormField("d", "D", "date"), FormField("t", "T"))))
    assert check_submit(spec, {"d": "2024-02-29 +0800", "t": "a\ud800b"}) == {
        "d": "2024-02-29", "t": "a\ufffdb"}
    for bad in ("2024-99-99", "2023-02-29", "\u0662\u0660\u0662\u0664-\u0660\u0661-\u0660\u0661",
                "2024-01-01xyz"):
        assert check_submit(spec, {"d": bad}) == "Not a date: D", bad
