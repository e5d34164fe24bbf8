"""Markdown answers become text, posts or cards. Pure."""

from __future__ import annotations

import pytest

from gateway.feishu.outbound.render import as_post, card_json, forms_to_try, pick_format, render


@pytest.mark.parametrize(("text", "form"), [
    ("echo: hello there", "text"),
    ("a * b = c, 2 - 1", "text"),
    ("# Title\nbody", "post"),
    ("some **bold** words", "post"),
    ("see [the doc](https://d/x)", "post"),
    ("steps:\n- one\n- two", "post"),
    ("> quoted", "post"),
    ("run `make`", "post"),
    ("code:\n```python\nprint(1)\n```", "card"),
    ("| a | b |\n| --- | --- |\n| 1 | 2 |", "card"),
])
def test_auto_picks_the_form_the_text_needs(text: str, form: str) -> None:
    assert pick_format(text, "auto") == form
    assert pick_format(text, "text") == "text"
    assert pick_format(text, "card") == "card"


def test_each_form_carries_the_text_whole() -> None:
    text = "# T\n\n```py\nx = 1\n```"
    assert render(text, "text").content == {"text": text}
    assert as_post(text).content == {"zh_cn": {"content": [[{"tag": "md", "text": text}]]}}
    card = render(text, "card")
    assert card.msg_type == "interactive"
    assert card.content["schema"] == "2.0"
    assert card.content["body"]["elements"] == [{"tag": "markdown", "content": text}]


def test_rich_forms_fall_back_to_text_and_text_has_no_fallback() -> None:
    assert forms_to_try("**x**", "auto") == ["post", "text"]
    assert forms_to_try("x", "auto") == ["text"]
    assert forms_to_try("x", "card") == ["card", "text"]


def test_a_streaming_card_names_its_element_and_shows_a_footer() -> None:
    card = card_json("partial", element_id="answer", streaming=True, footer="stopped")
    assert card["config"]["streaming_mode"] is True
    assert card["body"]["elements"][0] == {"tag": "markdown", "content": "partial",
                                           "element_id": "answer"}
    assert card["body"]["elements"][1]["content"] == "stopped"
