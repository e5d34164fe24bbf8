"""The Stop button of a streaming card, in Redis: a click becomes a stop job for the control
desk (lua/stopclick.lua: deduped by the click's token, bound to the turn it was shown for),
the turn's card reads who stopped it; a stopped turn notes that its answer shows the stop's
mark, so the stop's command is confirmed with a reaction, not said twice."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.store_types import text_of
from gateway.core.scripts import pack

RECORD_TTL_MS = 300_000
"""Who stopped a turn is remembered this long (as long as the stop's own record)."""


@dataclass(frozen=True, slots=True)
class StopClick:
    outcome: str
    """`stopping` (a stop job was written), `duplicate` (the same click again) or `over`
    (the turn the card was shown for no longer holds the chat)."""
    fence: int = 0


class StopClickSteps(ChatScripts):
    def click_stop(self, chat_id: str, turn_message_id: str, clicker: str,
                   token: str, sent_ms: int = 0) -> StopClick:
        """A click on the Stop button of the card of the turn of `turn_message_id` in chat
        (state id) `chat_id`, by `clicker`, made at `sent_ms` (Feishu's clock; 0 unknown);
        `token` names the click (Feishu's own)."""
        options = pack({"dedupe_ttl_s": self.config.dedupe_ttl_s,
                        "control_cap": self.config.control_cap,
                        "record_ttl_ms": RECORD_TTL_MS, "sent_ms": sent_ms})
        reply = self.run_script("stopclick", chat_id,
                                [chat_id, turn_message_id, clicker, token, options],
                                [self.keys(chat_id).click(f"stop:{token}")])
        outcome = text_of(reply[0])
        return StopClick(outcome, int(text_of(reply[1])) if len(reply) > 1 else 0)

    def stopped_by(self, chat_id: str, fence: int) -> str:
        """Who clicked Stop on the card of the turn of `fence` ('' nobody)."""
        by, by_fence = self.redis.hmget(self.keys(chat_id).stop, ["by", "by_fence"])
        return text_of(by) if by and text_of(by_fence) == str(fence) else ""

    def note_stop_shown(self, chat_id: str, fence: int) -> None:
        """The stopped turn of `fence` put the stop's mark on its answer."""
        self.redis.set(self.keys(chat_id).stop_shown(fence), "1", px=RECORD_TTL_MS)

    def stop_shown(self, chat_id: str, fence: int) -> bool:
        """Whether the answer of the turn of `fence` shows (or, its card still live, will be
        closed with) the stop's mark: its turn noted it, or a card of it is still live
        (gateway/orphan_cards.py closes it with the mark). One round trip."""
        k = self.keys(chat_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(k.stop_shown(fence))
            pipe.sismember(k.live_cards, str(fence))
            noted, live = pipe.execute()
        return bool(noted) or bool(live)
