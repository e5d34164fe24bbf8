"""Splitting a long reply into messages Feishu accepts. Pure.

Cuts at the last paragraph break, else line break, else space before the limit; a
code fence open at a cut is closed at the end of the chunk and reopened (with its
language) at the start of the next, so every chunk renders on its own.
"""

from __future__ import annotations

FENCE = "```"


def _cut_point(text: str, limit: int) -> int:
    for separator in ("\n\n", "\n", " "):
        at = text.rfind(separator, limit // 2, limit)
        if at > 0:
            return at + len(separator)
    return limit


def _open_fence(chunk: str, opened: str | None) -> str | None:
    """The fence line still open at the end of `chunk` (None when all are closed)."""
    for line in chunk.splitlines():
        if line.lstrip().startswith(FENCE):
            opened = None if opened is not None else line.strip()
    return opened


def chunk_text(text: str, limit: int) -> list[str]:
    """Chunks of at most `limit` characters (plus a fence line when one is carried over)."""
    if limit < 32:
        raise ValueError("limit must be at least 32 characters")
    chunks: list[str] = []
    opened: str | None = None
    rest = text
    while rest:
        prefix = f"{opened}\n" if opened else ""
        room = limit - len(prefix) - len(FENCE) - 1
        if len(rest) <= limit - len(prefix):
            chunks.append(prefix + rest)
            break
        at = _cut_point(rest, room)
        piece, rest = rest[:at], rest[at:]
        body = prefix + piece
        opened = _open_fence(body, None)
        chunks.append(f"{body.rstrip()}\n{FENCE}" if opened else body.rstrip())
    return [chunk for chunk in chunks if chunk.strip()]
