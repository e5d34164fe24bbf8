"""The files and images of messages: their bytes, kind, name and type, by message and
key (served by downloads.py)."""

from __future__ import annotations

import mimetypes
import threading
from dataclasses import dataclass

KINDS = frozenset({"image", "file"})


@dataclass(frozen=True)
class Resource:
    data: bytes
    kind: str
    """"image" (an image, or an image in a post) or "file" (file, audio, video)."""
    name: str
    content_type: str


class ResourceStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Resource] = {}

    def add(self, message_id: str, file_key: str, data: bytes, *, kind: str = "file",
            name: str = "a.txt", content_type: str | None = None) -> Resource:
        if kind not in KINDS:
            raise ValueError(f"a resource is an image or a file, not {kind!r}")
        guessed = mimetypes.guess_type(name)[0]
        if kind == "image" and not (guessed or "").startswith("image/"):
            guessed = None
        fallback = "image/png" if kind == "image" else "application/octet-stream"
        resource = Resource(bytes(data), kind, name, content_type or guessed or fallback)
        with self._lock:
            self._items[(message_id, file_key)] = resource
        return resource

    def get(self, message_id: str, file_key: str) -> Resource | None:
        with self._lock:
            return self._items.get((message_id, file_key))
