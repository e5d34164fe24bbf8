"""The download of a message's files and images (im/v1 message resources).

From server-docs im-v1/message-resource/get: GET /open-apis/im/v1/messages/:message_id/
resources/:file_key?type=image|file answers the bytes (the type in Content-Type); errors
are JSON: 234001 invalid parameter, 234003 the key is not in that message, 234043 an
unsupported message (merge_forward and its children, cards), 230110 a deleted message,
234037 over 100 MB. Chosen here where the page is silent: a withdrawn message answers
230110, a message the simulator never saw 234003, a `type` that does not match the
resource (image vs file) 234001, and Content-Disposition is `attachment; filename="..."`
(plus RFC 5987 filename* for a non-ASCII name), which lark-oapi reads the name from.
"""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.callers import authorize
from gateway.simulator.resources import KINDS, Resource
from gateway.simulator.state import SimState
from gateway.simulator.wire import ApiError

PATH = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
MAX_BYTES = 100 * 1024 * 1024
UNSUPPORTED = frozenset({"merge_forward", "interactive", "sticker"})


def content_disposition(name: str) -> str:
    if name.isascii():
        return 'attachment; filename="{}"'.format(name.replace("\\", "_").replace('"', "_"))
    fallback = name.encode("ascii", "replace").decode("ascii").replace('"', "_")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


class ResourceApi:
    def __init__(self, apps: AppRegistry, state: SimState) -> None:
        self.apps, self.state = apps, state

    def routes(self) -> list[web.RouteDef]:
        return [web.get(PATH, self.download)]

    def _resource(self, message_id: str, file_key: str, kind: str) -> Resource:
        rec = self.state.get_message(message_id)
        if rec is None:
            if self.state.withdrawn(message_id):
                raise ApiError(c.CODE_MESSAGE_DELETED,
                               "Action unavailable as the message has been deleted.")
            raise ApiError(c.CODE_FILE_NOT_IN_MESSAGE, "File not in message.")
        if rec.msg_type in UNSUPPORTED or rec.upper_message_id is not None:
            raise ApiError(c.CODE_RESOURCE_UNSUPPORTED, "Unsupported message type.")
        resource = self.state.resources.get(message_id, file_key)
        if resource is None:
            raise ApiError(c.CODE_FILE_NOT_IN_MESSAGE, "File not in message.")
        if resource.kind != kind:
            raise ApiError(c.CODE_RESOURCE_PARAM, f"Invalid request param: type={kind} but "
                           f"{file_key} is of type {resource.kind}.")
        if len(resource.data) > MAX_BYTES:
            raise ApiError(234037, "Downloaded file size exceeds limit.")
        return resource

    async def download(self, request: web.Request) -> web.Response:
        authorize(request, self.apps, self.state)
        kind = request.query.get("type", "")
        if kind not in KINDS:
            raise ApiError(c.CODE_RESOURCE_PARAM, "Invalid request param: type must be "
                           "image or file.")
        resource = self._resource(request.match_info["message_id"],
                                  request.match_info["file_key"], kind)
        headers = {"Content-Type": resource.content_type,
                   "Content-Disposition": content_disposition(resource.name)}
        return web.Response(body=resource.data, headers=headers)
