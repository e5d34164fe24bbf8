"""The files and images of messages: their bytes, kind, name and type, by message and
key (served by downloads.py); and what the apps uploaded for their bots to send
(uploads.py)."""

from __future__ import annotations

import mimetypes
import secrets
import threading
from collections.abc import Callable
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


@dataclass(frozen=True)
class Upload:
    app_id: str
    kind: str
    """image or file."""
    name: str
    data: bytes


class UploadStore:
    """What each app uploaded, by key (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Upload] = {}
        self.count = 0
        self.after_add: Callable[[Upload], None] | None = None
        """A test's hook on each upload, before it is answered (Controls.on_upload)."""

    def add(self, upload: Upload) -> str:
        key = ("img_v3_" if upload.kind == "image" else "file_v3_") + secrets.token_hex(12)
        with self._lock:
            self._items[key] = upload
            self.count += 1
        if self.after_add is not None:
            self.after_add(upload)
        return key

    def get(self, key: str) -> Upload | None:
        with self._lock:
            return self._items.get(key)
