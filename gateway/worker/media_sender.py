"""Images and files an agent sends: in its answer (parts beside its text) or at once with
`turn.send`. Each is uploaded (im/v1/images, im/v1/files, under the send quota, retried as a
send is) and sent as a reply to the turn's message, in its thread.

Sent once, whatever dies when: an answer's parts are uploaded before the answer is kept,
and the kept answer holds their keys (`media_piece`), so a re-run after a crash re-sends
them under the same uuids and uploads nothing again; a worker killed between an upload and
the answer being kept runs the agent again, whose second upload no user sees. A part sent
with `turn.send` has a uuid fixed by its place among the turn's sends, so a re-run that
sends the same parts in the same order shows each once."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from gateway.core.media import BadMedia, File, Image, Media, media_piece
from gateway.core.model import Message, Reply
from gateway.feishu.outbound.delivery import Replies, reply_uuid

Said = tuple[str, tuple[Media, ...]]
"""An agent's answer: its text, and the images and files it gave beside it, in order."""


def _texts(pieces: Iterable[object], media: list[Media]) -> Iterator[str]:
    for piece in pieces:
        if isinstance(piece, Image | File):
            media.append(piece)
        elif piece is not None:
            yield str(piece)


def said(reply: Reply, consume: Callable[[Iterable[str]], str] | None) -> Said | None:
    """The text and media of an agent's reply; its text pieces go through `consume` (a
    stream showing them as they come) when given, else are joined. None for no reply."""
    if reply is None:
        return None
    if isinstance(reply, str):
        return reply, ()
    if isinstance(reply, Image | File):
        return "", (reply,)
    media: list[Media] = []
    texts = _texts(reply, media)
    text = "".join(texts) if consume is None else consume(texts)
    return text, tuple(media)


def kind_of(part: Media) -> str:
    return "image" if isinstance(part, Image) else "file"


def content_of(kind: str, key: str) -> tuple[str, dict[str, str]]:
    """The msg_type and content of a message showing an uploaded image or file."""
    return (kind, {"image_key": key}) if kind == "image" else ("file", {"file_key": key})


@dataclass(frozen=True)
class MediaSender:
    replies: Replies

    def upload(self, message: Message, part: Media,
               stopped: threading.Event | None = None) -> str:
        """Upload one part for the bot of `message`; its media piece (kind, key, name)."""
        return media_piece(kind_of(part), upload_part(self.replies, message.app_id, part,
                                                      stopped), part.name)

    def pieces(self, message: Message, media: Iterable[Media],
               stopped: threading.Event | None = None) -> tuple[str, ...]:
        """Upload each part; their media pieces, in order (raises as a send does)."""
        return tuple(self.upload(message, part, stopped) for part in media)

    def direct(self, message: Message, stopped: threading.Event) -> Callable[[Media], str]:
        """`turn.send` for a turn answering `message`: upload and send one part now, as a
        reply in its thread; the n-th send of the turn has the same uuid on every run.
        Returns the sent message's id."""
        count = itertools.count()
        lock = threading.Lock()

        def send(part: Media) -> str:
            if not isinstance(part, Image | File):
                raise TypeError(f"turn.send takes an Image or a File, not {type(part).__name__}")
            with lock:
                n = next(count)
            msg_type, content = content_of(
                kind_of(part), upload_part(self.replies, message.app_id, part, stopped))
            return self.replies.send(message.message_id, msg_type, content,
                                     uuid=reply_uuid(message.reply_key, "sent", n),
                                     in_thread=bool(message.thread_id), app_id=message.app_id,
                                     chat_id=message.chat_id, stopped=stopped)

        return send


def upload_at(replies: Replies, app_id: str, image_path: str, file_path: str) -> str:
    """Upload the image or the file at a path for the bot of `app_id` (a message the bot
    starts: gateway/chats/outbound.py); its media piece. BadMedia with one line for what
    Feishu would not take, or for both paths given."""
    if bool(image_path) == bool(file_path):
        raise BadMedia("say one thing: an image or a file")
    part: Media = Image(image_path) if image_path else File(file_path)
    return media_piece(kind_of(part), upload_part(replies, app_id, part), part.name)


def upload_part(replies: Replies, app_id: str, part: Media,
                stopped: threading.Event | None = None) -> str:
    """Upload one image or file for the bot of `app_id` (under the send quota, retried);
    its key."""
    return replies.upload(kind_of(part), part.name, part.data, app_id=app_id,
                          file_type=part.file_type if isinstance(part, File) else "",
                          stopped=stopped)
