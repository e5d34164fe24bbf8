"""The demo's terminal draws the bot's markdown: headings, bold, italics, code, bullets and
links as a terminal can show them, code blocks and tables as they are, and a growing answer
only ever grows on the screen (what it shows is never taken back)."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st

from gateway.ops.markdown_text import BOLD, CODE, RESET, terminal_text
from gateway.ops.transcript import Transcript
from tests.ops.test_demo_parts import message

ANSWER = ("# Plan\nSome **bold**, *slanted* and `code`, see [the docs](https://x.y/z).\n"
          "- first **step**\n* second\n```py\nx = 2 * 3  # **not bold**\n```\n"
          "| a | b |\n|---|---|\n2 * 3 is 6, *and* done")


def test_markdown_is_drawn_as_plain_text_off_a_terminal() -> None:
    assert terminal_text(ANSWER, final=True).split("\n") == [
        "Plan", "Some bold, slanted and `code`, see the docs (https://x.y/z).",
        "• first step", "• second", "```py", "x = 2 * 3  # **not bold**", "```",
        "| a | b |", "|---|---|", "2 * 3 is 6, and done"]


def test_on_a_terminal_bold_and_code_are_styled() -> None:
    drawn = terminal_text("# Plan\n**a** `b`", final=True, styled=True).split("\n")
    assert drawn == [f"{BOLD}Plan{RESET}", f"{BOLD}a{RESET} {CODE}b{RESET}"]


@given(st.text(alphabet="ab *`[]()#-|\n", max_size=40), st.booleans())
def test_what_a_growing_answer_shows_is_never_taken_back(text: str, styled: bool) -> None:
    final = terminal_text(text, final=True, styled=styled)
    for cut in range(len(text) + 1):
        shown = terminal_text(text[:cut], final=False, styled=styled)
        assert final.startswith(shown), (text[:cut], shown, final)
        assert terminal_text(text[:cut + 1], final=False, styled=styled).startswith(shown)


def test_the_terminal_prints_a_streamed_markdown_answer_once_drawn() -> None:
    out = io.StringIO()
    screen = Transcript(out, prompt=False)
    for end in range(1, len(ANSWER) + 1, 7):
        screen.show(message(ANSWER[:end], streaming=True, card=True))
    screen.show(message(ANSWER, card=True))
    printed = out.getvalue()
    assert "bot (now)" not in printed, "grown, never printed again"
    assert "**" not in printed.replace("**not bold**", "") and "# Plan" not in printed
    assert "• first step" in printed and "the docs (https://x.y/z)" in printed
