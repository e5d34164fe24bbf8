"""Controls and views of the send rate limit, refused message types, card entities,
message resources and uploads; mixed into Simulator. Every wait polls the state with a deadline."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from gateway.simulator import config as c
from gateway.simulator.apps import AppRegistry
from gateway.simulator.cards import CardView
from gateway.simulator.faults import FaultPlan
from gateway.simulator.ratelimit import WINDOW_S
from gateway.simulator.records import SentMessage
from gateway.simulator.state import SimState


class Controls:
    state: SimState
    faults: FaultPlan
    apps: AppRegistry

    # the send rate limit
    def set_rate_limit(self, per_s: int | None, *, app_id: str | None = None) -> None:
        """Limit the sending calls (create, reply, update, patch, reactions, CardKit) to
        `per_s` per sliding second per app: beyond it they get HTTP 429, code 99991400,
        with x-ogw-ratelimit-limit and x-ogw-ratelimit-reset, as Feishu answers. With
        app_id None the limit holds for every app (each its own window); a limit set for
        one app wins over it. None lifts that limit (off by default)."""
        if app_id is not None:
            self.apps.get(app_id)
        self.state.limiter.set(per_s, app_id)

    def send_times(self, app_id: str | None = None) -> list[float]:
        """When each sending call the limit let through came in (time.time()), sorted; of
        one app or (None) of every app. Recorded with or without a limit."""
        return self.state.limiter.times(app_id)

    def send_rate(self, app_id: str | None = None) -> list[int]:
        """Sending calls let through per wall-clock second, first to last (zeros between)."""
        return self.state.limiter.per_second(app_id)

    def max_send_rate(self, app_id: str | None = None) -> int:
        """The most sending calls let through within any one second (sliding)."""
        times, best, start = self.send_times(app_id), 0, 0
        for end, t in enumerate(times):
            while t - times[start] >= WINDOW_S:
                start += 1
            best = max(best, end - start + 1)
        return best

    def rate_limited_count(self, app_id: str | None = None) -> int:
        """Calls answered 429 by the rate limit (injected "429" faults: see fault_counts)."""
        return self.state.limiter.limited(app_id)

    # rich forms
    def reject_msg_types(self, msg_types: Iterable[str] | str | None, *,
                         code: int = c.CODE_INVALID_MESSAGE) -> None:
        """Refuse every create and reply of these msg_types (e.g. {"post", "interactive"})
        with `code` (default 230001, Feishu's invalid-content answer), HTTP 400; None or
        empty refuses none again."""
        types = {msg_types} if isinstance(msg_types, str) else set(msg_types or ())
        self.faults.reject_types(types, code)

    @property
    def rejected_sends(self) -> dict[str, int]:
        """Sends refused by reject_msg_types, by msg_type."""
        return self.state.counters("rejected:")

    # card entities
    def card(self, card_id: str) -> CardView | None:
        """A card entity as it is now (every update applied), or None when unknown."""
        return self.state.cards.view(card_id)

    def cards(self, app_id: str | None = None) -> list[CardView]:
        """Every card entity created (by one app), in order."""
        return self.state.cards.views(app_id)

    def card_of(self, message_id: str) -> CardView | None:
        """The card entity a message shows (sent as {"type": "card", ...}), or None."""
        rec = self.state.get_message(message_id)
        return self.card(rec.card_id) if rec is not None and rec.card_id else None

    def card_updates(self, card_id: str) -> int:
        """Update calls that changed the card (text, settings, full update); KeyError
        when unknown."""
        view = self.card(card_id)
        if view is None:
            raise KeyError(f"simulator: no card entity {card_id!r}")
        return view.updates

    def expire_card_streaming(self, card_id: str) -> None:
        """Close the card's streaming mode as Feishu does by itself 10 minutes after it was
        turned on: text updates get 200850 until settings or an update turn it on again."""
        self.state.cards.expire_streaming(card_id)

    def set_card_streaming_s(self, seconds: float) -> None:
        """Compress Feishu's streaming timeout: streaming mode closes by itself `seconds`
        after it was turned on (Feishu: 10 minutes), for cards turned on from now; text
        updates then get 200850."""
        self.state.cards.set_streaming_s(seconds)

    def wait_for_card(self, message_id: str, *, text: str | None = None,
                      streaming: bool | None = None, timeout_s: float = 10) -> CardView:
        """Wait until `message_id` shows a card entity (reading `text`, in streaming mode
        or not, when given); returns it."""
        def probe() -> CardView | None:
            view = self.card_of(message_id)
            if view is None or (text is not None and view.text != text):
                return None
            return None if streaming is not None and view.streaming_mode != streaming else view

        def describe() -> str:
            return (f"waiting for message {message_id} to show a card (text={text!r}, "
                    f"streaming={streaming}), have {self.card_of(message_id)}")
        return self.state.wait_for(probe, timeout_s, describe)

    # message resources
    def add_resource(self, message_id: str, file_key: str, data: bytes, *,
                     kind: str = "file", name: str = "a.txt",
                     content_type: str | None = None) -> None:
        """A file or image of a message, served by GET .../messages/{message_id}/
        resources/{file_key}?type={kind} ("image" or "file": files, audio, video).
        Content-Type is `content_type`, else guessed from `name`."""
        self.state.resources.add(message_id, file_key, data, kind=kind, name=name,
                                 content_type=content_type)

    # what the bots upload, and a hook on what they send
    @property
    def upload_count(self) -> int:
        """Images and files the bots uploaded so far (im/v1/images, im/v1/files)."""
        return self.state.uploads.count

    def resource_of(self, message_id: str) -> bytes | None:
        """The bytes an image or file message shows (a user's or a bot's)."""
        rec = self.state.get_message(message_id)
        if rec is None:
            return None
        content = json.loads(rec.content) if rec.content else {}
        key = content.get("image_key") or content.get("file_key") if isinstance(
            content, dict) else None
        found = self.state.resources.get(message_id, key) if isinstance(key, str) else None
        return None if found is None else found.data

    def on_bot_message(self, hook: Callable[[SentMessage], None] | None) -> None:
        """Run `hook` with each new message a bot sends, on the simulator's loop, before the
        open API answers the call that sent it (a test kills a worker there: the message is
        sent, and the worker never learns it); None to stop."""
        self.state.after_bot_message = None if hook is None else (
            lambda rec: hook(self.state.view(rec)))

    def on_upload(self, hook: Callable[[str, str], None] | None) -> None:
        """Run `hook(kind, name)` with each upload, on the simulator's loop, before it is
        answered (a test kills a worker there: the upload happened, its key never came
        back); None to stop."""
        self.state.uploads.after_add = None if hook is None else (
            lambda upload: hook(upload.kind, upload.name))
