"""What an agent can send besides text: an `Image` or a `File`, given as bytes or a path,
checked against Feishu's limits when it is made (so the agent gets the error, with one clear
line, before anything is uploaded): an image of at most 10 MB in a format Feishu takes, a
file of at most 30 MB, neither empty. Pure, but for reading a path."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from gateway.core.errors import RejectedError

IMAGE_MAX_BYTES = 10 * 1024 * 1024
"""Feishu's limit on an uploaded image (im/v1/images)."""
FILE_MAX_BYTES = 30 * 1024 * 1024
"""Feishu's limit on an uploaded file (im/v1/files)."""

IMAGE_MAGIC = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "jpeg", b"GIF87a": "gif",
               b"GIF89a": "gif", b"BM": "bmp", b"\x00\x00\x01\x00": "ico",
               b"II*\x00": "tiff", b"MM\x00*": "tiff"}
"""How each image format Feishu takes begins (WEBP and HEIC: `_image_format`)."""

FILE_TYPES = {".opus": "opus", ".mp4": "mp4", ".pdf": "pdf", ".doc": "doc", ".docx": "doc",
              ".xls": "xls", ".xlsx": "xls", ".ppt": "ppt", ".pptx": "ppt"}
"""Feishu's file_type by the file's extension; any other file is a `stream`."""

MEDIA_MARK = "\x00media\x00"
"""What opens a kept answer's piece that is an uploaded image or file (`media_piece`)."""


class BadMedia(RejectedError):
    """An image or file Feishu would not take (too large, empty, not an image, a path that
    cannot be read): raised where the agent makes it."""


def _image_format(data: bytes) -> str | None:
    for magic, name in IMAGE_MAGIC.items():
        if data.startswith(magic):
            return name
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[4:8] == b"ftyp" and data[8:12] in (b"heic", b"heix", b"mif1", b"msf1"):
        return "heic"
    return None


def _read(source: bytes | str | PurePath, what: str, limit: int) -> tuple[bytes, str]:
    """The bytes of `source` and the name its path gives ("" for bytes)."""
    if isinstance(source, bytes | bytearray | memoryview):
        data, name = bytes(source), ""
    else:
        path = Path(source)
        try:
            size = path.stat().st_size
            if size > limit:
                raise BadMedia(f"{what} {path} is {size:,} bytes; Feishu takes at most "
                               f"{limit:,}")
            data = path.read_bytes()
        except OSError as error:
            raise BadMedia(f"{what} {path} cannot be read: {error.strerror or error}") from None
        name = path.name
    if not data:
        raise BadMedia(f"{what} {name or '(bytes)'} is empty; Feishu takes none")
    if len(data) > limit:
        raise BadMedia(f"{what} {name or '(bytes)'} is {len(data):,} bytes; Feishu takes at "
                       f"most {limit:,}")
    return data, name


@dataclass(frozen=True)
class Image:
    """An image to send (PNG, JPEG, GIF, WEBP, BMP, ICO, TIFF or HEIC, at most 10 MB):
    `Image("chart.png")`, `Image(png_bytes, name="chart.png")`. BadMedia when Feishu would
    not take it."""

    source: bytes | str | PurePath = field(repr=False)
    name: str = ""
    data: bytes = field(init=False, repr=False, default=b"")

    def __post_init__(self) -> None:
        data, named = _read(self.source, "image", IMAGE_MAX_BYTES)
        kind = _image_format(data)
        if kind is None:
            raise BadMedia(f"image {self.name or named or '(bytes)'} is not a PNG, JPEG, GIF, "
                           "WEBP, BMP, ICO, TIFF or HEIC image")
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "name", self.name or named or f"image.{kind}")


@dataclass(frozen=True)
class File:
    """A file to send (at most 30 MB): `File("report.pdf")`, `File(data, name="a.csv")`.
    BadMedia when Feishu would not take it."""

    source: bytes | str | PurePath = field(repr=False)
    name: str = ""
    data: bytes = field(init=False, repr=False, default=b"")

    def __post_init__(self) -> None:
        data, named = _read(self.source, "file", FILE_MAX_BYTES)
        name = self.name or named
        if not name:
            raise BadMedia("a file given as bytes needs a name (File(data, name=...))")
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "name", name)

    @property
    def file_type(self) -> str:
        """Feishu's file_type for it."""
        return FILE_TYPES.get(PurePath(self.name).suffix.lower(), "stream")


Media = Image | File


def media_piece(kind: str, key: str, name: str) -> str:
    """A kept answer's piece that is an uploaded image (`kind` image) or file: what is sent
    again, under the same uuid, with no second upload (pure)."""
    return MEDIA_MARK + json.dumps({"kind": kind, "key": key, "name": name},
                                   ensure_ascii=False, separators=(",", ":"))


def parse_media_piece(piece: str) -> tuple[str, str, str] | None:
    """(kind, key, name) of a media piece; None for a piece of text (pure)."""
    if not piece.startswith(MEDIA_MARK):
        return None
    try:
        data = json.loads(piece[len(MEDIA_MARK):])
    except ValueError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str)
                                             for k in ("kind", "key", "name")):
        return None
    return data["kind"], data["key"], data["name"]
