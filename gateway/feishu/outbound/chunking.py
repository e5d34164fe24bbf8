"""Splitting a long reply into messages Feishu accepts. Pure.

Cuts at the last paragraph break, else line break, else space before the limit. What a cut
would break is carried over so every chunk renders on its own: a code fence open at a cut
is closed at the end of the chunk and reopened (with its language) at the start of the
next; a table cut between rows has its header row repeated at the top of the next chunk.
A reply with more tables than one card element may hold is split between tables first.
When there is more than one chunk, each ends with its label "(i/n)". A chunk also keeps
within MAX_BYTES of UTF-8, so a card or post of it stays under Feishu's 30 KB (CJK text
takes three bytes a character): a long answer goes on in the next message.
"""

from __future__ import annotations

import re

FENCE = "```"
LABEL_ROOM = 12
"""Characters kept free in every chunk for its " (i/n)" label."""
MAX_BYTES = 24_000
"""UTF-8 bytes of one chunk at most: Feishu takes 30 KB of card or post content, and the
rest is kept for the JSON around it (escapes, the card's elements, a streaming card's steps
and button)."""
_ROW = re.compile(r"^\s*\|.*\|\s*$")
_RULE = re.compile(r"^\s*\|?(\s*:?-{3,}:?\s*\|)+\s*(:?-{3,}:?\s*)?\|?\s*$")


def _cut_point(text: str, limit: int) -> int:
    for separator in ("\n\n", "\n", " "):
        at = text.rfind(separator, limit // 2, limit)
        if at > 0:
            return at + len(separator)
    return limit


def _open_fence(chunk: str) -> str | None:
    """The fence line still open at the end of `chunk` (None when all are closed)."""
    opened: str | None = None
    for line in chunk.splitlines():
        if line.lstrip().startswith(FENCE):
            opened = None if opened is not None else line.strip()
    return opened


def _table_header(body: str, rest: str) -> str | None:
    """The header and rule lines of a table cut between `body` and `rest`, if one is."""
    lines = body.rstrip("\n").split("\n")
    if not lines or not _ROW.match(lines[-1]) or not _ROW.match(rest.split("\n", 1)[0]):
        return None
    start = len(lines) - 1
    while start > 0 and _ROW.match(lines[start - 1]):
        start -= 1
    if start + 1 < len(lines) and _RULE.match(lines[start + 1]):
        return f"{lines[start]}\n{lines[start + 1]}"
    return None


def tables_in(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of the markdown tables outside code fences."""
    found: list[tuple[int, int]] = []
    offset, fenced, start = 0, False, -1
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.lstrip().startswith(FENCE):
            fenced = not fenced
        in_table = not fenced and bool(_ROW.match(line))
        if in_table and start < 0 and index + 1 < len(lines) and _RULE.match(lines[index + 1]):
            start = offset
        elif start >= 0 and not in_table:
            found.append((start, offset - 1))
            start = -1
        offset += len(line) + 1
    if start >= 0:
        found.append((start, len(text)))
    return found


def split_tables(text: str, max_tables: int) -> list[str]:
    """`text` cut after every `max_tables`-th table, so no piece holds more."""
    tables = tables_in(text)
    cuts = [end for n, (_, end) in enumerate(tables, 1) if n % max_tables == 0
            and n < len(tables)]
    pieces, begin = [], 0
    for cut in cuts:
        pieces.append(text[begin:cut].strip("\n"))
        begin = cut
    pieces.append(text[begin:].strip("\n"))
    return [piece for piece in pieces if piece.strip()]


def fits_within(text: str, chars: int, max_bytes: int) -> int:
    """How many of `text`'s first characters fit in `chars` and `max_bytes` of UTF-8."""
    chars = min(chars, len(text))
    if len(text[:chars].encode()) <= max_bytes:
        return chars
    low, high = 0, chars  # the most that fits lies in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if len(text[:middle].encode()) <= max_bytes:
            low = middle
        else:
            high = middle
    return low


def chunk_text(text: str, limit: int, max_bytes: int = MAX_BYTES) -> list[str]:
    """Chunks of at most `limit` characters and about `max_bytes` of UTF-8 (plus a carried
    fence line or table header)."""
    if limit < 32:
        raise ValueError("limit must be at least 32 characters")
    chunks: list[str] = []
    carried = ""
    rest = text
    while rest:
        prefix = f"{carried}\n" if carried else ""
        fits = fits_within(rest, limit - len(prefix), max_bytes - len(prefix.encode()))
        room = fits - len(FENCE) - 1
        if len(rest) <= fits:
            chunks.append(prefix + rest)
            break
        at = _cut_point(rest, max(room, 16))
        piece, rest = rest[:at], rest[at:]
        body = prefix + piece
        opened = _open_fence(body)
        header = None if opened else _table_header(body, rest)
        carried = opened or header or ""
        chunks.append(f"{body.rstrip()}\n{FENCE}" if opened else body.rstrip())
    return [chunk for chunk in chunks if chunk.strip()]


def chunk_markdown(text: str, limit: int, *, max_tables: int = 4) -> list[str]:
    """The reply's chunks, each renderable alone, with at most `max_tables` tables and
    `limit` characters (label included), labelled "(i/n)" when there are several."""
    chunks = [chunk for piece in split_tables(text, max_tables)
              for chunk in chunk_text(piece, limit - LABEL_ROOM)]
    if len(chunks) < 2:
        return chunks
    return [f"{chunk}\n\n({n}/{len(chunks)})" for n, chunk in enumerate(chunks, 1)]
