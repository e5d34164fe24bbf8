"""Uploads for the bot to send (im/v1/images, im/v1/files), and the image and file messages
that show them.

From server-docs im-v1/image/create and im-v1/file/create: multipart/form-data; an image
(`image_type` message or avatar, `image`) of at most 10 MB and not empty answers
data.image_key; a file (`file_type` opus, mp4, pdf, doc, xls, ppt or stream, `file_name`,
`file`) of at most 30 MB and not empty answers data.file_key. Chosen here where the pages
are silent: an image the simulator cannot tell as one (by its first bytes) is refused
234011, too large 234006, empty 234010, a bad field 99992402; a message of type image or
file whose key this app did not upload is refused 230001 (Feishu: the key is the app's).
Every upload counts (`uploads`), so a test sees a second upload of the same bytes."""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.callers import authorize
from gateway.simulator.resources import Upload, UploadStore
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError, ok

FILE_TYPES = frozenset({"opus", "mp4", "pdf", "doc", "xls", "ppt", "stream"})
IMAGE_LIMIT = 10 * 1024 * 1024
FILE_LIMIT = 30 * 1024 * 1024
IMAGE_STARTS = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"BM", b"\x00\x00\x01\x00", b"II*",
                b"MM\x00*")
"""How the images Feishu takes begin (and RIFF....WEBP, ....ftyp for HEIC: `is_image`)."""
CODE_TOO_LARGE = 234006
CODE_EMPTY = 234010
CODE_NOT_AN_IMAGE = 234011


def shown_upload(state: SimState, uploads: UploadStore, app_id: str, message_id: str,
                 msg_type: str, content: dict[str, Any]) -> None:
    """An image or file message the bot sends: its key must be one this app uploaded; its
    bytes become the message's resource (downloadable, shown by the web chat)."""
    if msg_type not in ("image", "file"):
        return
    key = content.get("image_key" if msg_type == "image" else "file_key")
    upload = uploads.get(key) if isinstance(key, str) else None
    if upload is None or upload.app_id != app_id or upload.kind != msg_type \
            or not isinstance(key, str):
        raise ApiError(c.CODE_INVALID_MESSAGE, f"invalid {msg_type} key: {key!r} is no "
                       f"{msg_type} this app uploaded")
    state.resources.add(message_id, key, upload.data, kind=upload.kind, name=upload.name)


class UploadApi:
    def __init__(self, apps: AppRegistry, state: SimState, uploads: UploadStore) -> None:
        self.apps, self.state, self.uploads = apps, state, uploads

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/open-apis/im/v1/images", self.image),
                web.post("/open-apis/im/v1/files", self.file)]

    async def _form(self, request: web.Request, part: str) -> tuple[dict[str, str], str, bytes]:
        fields: dict[str, str] = {}
        name, data = "", b""
        try:
            reader = await request.multipart()
        except (AssertionError, ValueError, KeyError) as error:
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           f"field validation failed: not multipart/form-data ({error})") from None
        while (field := await reader.next()) is not None:
            if not isinstance(field, aiohttp.BodyPartReader) or field.name is None:
                continue
            if field.name == part:
                name, data = field.filename or "", bytes(await field.read())
            else:
                fields[field.name] = await field.text()
        return fields, name, data

    async def image(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        fields, name, data = await self._form(request, "image")
        if fields.get("image_type") not in ("message", "avatar"):
            raise ApiError(c.CODE_FIELD_VALIDATION, "field validation failed: image_type")
        _check_size(data, IMAGE_LIMIT)
        if not is_image(data):
            raise ApiError(CODE_NOT_AN_IMAGE, "The image type is not supported.")
        key = self.uploads.add(Upload(app.app_id, "image", name or "image.png", data))
        return ok({"image_key": key})

    async def file(self, request: web.Request) -> web.Response:
        app = authorize(request, self.apps, self.state)
        fields, name, data = await self._form(request, "file")
        if fields.get("file_type") not in FILE_TYPES or not fields.get("file_name"):
            raise ApiError(c.CODE_FIELD_VALIDATION,
                           "field validation failed: file_type and file_name are required")
        _check_size(data, FILE_LIMIT)
        key = self.uploads.add(Upload(app.app_id, "file", fields["file_name"], data))
        return ok({"file_key": key})


def is_image(data: bytes) -> bool:
    return data.startswith(IMAGE_STARTS) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP") \
        or data[4:8] == b"ftyp"


def _check_size(data: bytes, limit: int) -> None:
    if not data:
        raise ApiError(CODE_EMPTY, "The file is empty.")
    if len(data) > limit:
        raise ApiError(CODE_TOO_LARGE, f"The file exceeds {limit} bytes.")
