"""A bar chart as a PNG, drawn with the standard library alone (the showcase's `chart`): no
plotting package, no font; bars on a light grid (pure)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

BACKGROUND = (250, 250, 252)
GRID = (225, 228, 235)
BAR = (51, 112, 255)
"""Feishu's blue."""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png(rows: Sequence[Sequence[tuple[int, int, int]]]) -> bytes:
    """An RGB PNG of `rows` of pixels (each row as wide as the first)."""
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(channel for pixel in row for channel in pixel)
                   for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b""))


def bar_chart(values: Sequence[float], *, width: int = 320, height: int = 180,
              margin: int = 12) -> bytes:
    """The values as bars, left to right, the tallest reaching the top margin."""
    top = max(max(values, default=0.0), 1e-9)
    slot = (width - 2 * margin) / max(len(values), 1)
    bars = [(int(margin + i * slot + slot * 0.15), int(margin + (i + 1) * slot - slot * 0.15),
             int((height - 2 * margin) * max(v, 0.0) / top)) for i, v in enumerate(values)]
    rows = []
    for y in range(height):
        up = height - margin - y  # (height above the base line)
        row = []
        for x in range(width):
            pixel = GRID if y % 30 == 0 and margin <= x < width - margin else BACKGROUND
            for left, right, tall in bars:
                if left <= x < right and 0 <= up < tall:
                    pixel = BAR
            row.append(pixel)
        rows.append(row)
    return png(rows)
