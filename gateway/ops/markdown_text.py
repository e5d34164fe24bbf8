"""Markdown as a terminal shows it: the demo prints the bot's answers as Feishu's client draws
them, not as the raw text the agent wrote. Headings and **bold** in bold, *italic* in
italics, `code` in colour, lists with bullets, [links](url) as their text and address;
fenced code blocks and tables as they are. Without a terminal (`styled` off) the same, in
plain text.

Pure, and safe to print as an answer grows: `terminal_text(text, final=False)` renders up to
the last point that later text cannot change (an unclosed `**`, `` ` `` or `[`, and a line
too short to tell whether it starts a list, are held back), so what it gives for a text is
always the beginning of what it gives for any longer text and for the final one.
"""

from __future__ import annotations

import re

BOLD, ITALIC, CODE, RESET = "\x1b[1m", "\x1b[3m", "\x1b[36m", "\x1b[0m"
FENCE = "```"

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_SPAN = re.compile(r"\*\*(?P<bold>[^*\n]+?)\*\*|`(?P<code>[^`\n]+)`"
                   r"|\[(?P<label>[^\]\n]+)\]\((?P<url>[^)\s]+)\)"
                   r"|(?<![*\w])\*(?P<italic>[^*\s][^*\n]*?)\*(?![*\w])")
_OPENERS = ("**", "`", "[", "*")
_UNDECIDED = re.compile(r"\s*(#{1,6}|[-*+]|`{1,2}|\|?)\s*")
"""A growing line that may yet turn into a heading, a bullet, a fence or a table row."""


def _style(text: str, code: str, styled: bool) -> str:
    return f"{code}{text}{RESET}" if styled and text else text


def _spans(line: str, styled: bool) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group("bold") is not None:
            return _style(match.group("bold"), BOLD, styled)
        if match.group("code") is not None:
            code = match.group("code")
            return _style(code, CODE, styled) if styled else f"`{code}`"
        if match.group("label") is not None:
            return f"{_style(match.group('label'), BOLD, styled)} ({match.group('url')})"
        return _style(match.group("italic"), ITALIC, styled)

    return _SPAN.sub(one, line)


def render_line(line: str, styled: bool) -> str:
    """One complete line outside a code fence."""
    heading = _HEADING.match(line)
    if heading:
        text = _spans(heading.group(2), False)
        return f"{BOLD}{text}{RESET}" if styled else text
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {_spans(bullet.group(2), styled)}"
    return _spans(line, styled)


def _growing_line(line: str, styled: bool) -> str:
    """The beginning of `render_line` of whatever line `line` grows into."""
    if _UNDECIDED.fullmatch(line):
        return ""  # ("-" may become "- item", "##" a heading)
    heading = _HEADING.match(line)
    if heading:  # (styled, held whole: a bold left open would run into what comes next)
        return "" if styled else _spans(_safe_prefix(heading.group(2)), False)
    bullet = _BULLET.match(line)
    if bullet:
        return f"{bullet.group(1)}• {_spans(_safe_prefix(bullet.group(2)), styled)}"
    return _spans(_safe_prefix(line), styled)


def _safe_prefix(text: str) -> str:
    """The part of a growing line that later text cannot change: up to its first opener
    (`**`, `` ` ``, `[`, `*`) not closed yet, or the start of a span that ends the text
    (the next character may undo it)."""
    end = 0
    for match in _SPAN.finditer(text):
        held = _first_opener(text[end:match.start()])
        if held is not None:
            return text[:end + held]
        if match.end() == len(text):
            return text[:match.start()]
        end = match.end()
    held = _first_opener(text[end:])
    return text if held is None else text[:end + held]


def _first_opener(text: str) -> int | None:
    found = [i for i in (text.find(o) for o in _OPENERS) if i >= 0]
    return min(found) if found else None


def terminal_text(text: str, *, final: bool, styled: bool = False) -> str:
    """`text` (markdown) as the terminal shows it; not `final`: only what later text cannot
    change (see the module's docstring)."""
    lines = text.split("\n")
    last = len(lines) - 1
    out: list[str] = []
    fenced = False
    for index, line in enumerate(lines):
        growing = index == last and not final
        if line.lstrip().startswith(FENCE):
            fenced = not fenced
            out.append(line)
        elif fenced or line.lstrip().startswith("|"):
            out.append(line)  # code and tables as they are
        elif growing:
            out.append(_growing_line(line, styled))
        else:
            out.append(render_line(line, styled))
    return "\n".join(out)
