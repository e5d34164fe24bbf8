"""Read-only views and waits over the simulator's state, mixed into Simulator."""

from __future__ import annotations

from gateway.simulator.apps import AppRegistry
from gateway.simulator.records import Ack, CardResponse, SentMessage, card_response
from gateway.simulator.redelivery import MISSED, REDELIVERIES, WATCHED
from gateway.simulator.state import SimState
from gateway.simulator.webhook import UNANSWERED


class Observations:
    """What happened on the simulator; every wait polls the state with a deadline."""

    state: SimState
    apps: AppRegistry
    card_answer_limit_ms: float

    @property
    def connection_count(self) -> int:
        """Live long connections of every app; silent ones (see go_silent) not included."""
        return self.state.connection_count

    @property
    def silent_connection_count(self) -> int:
        """Connections made silent by go_silent that the client has not closed yet."""
        return self.state.silent_count

    @property
    def close_codes(self) -> list[int | None]:
        """One entry per ended connection: the close code the client sent, or None when the
        connection ended without a close frame from the client."""
        return self.state.close_codes

    @property
    def acks(self) -> list[Ack]:
        return self.state.acks

    def sent_messages(self, chat_id: str | None = None, *,
                      app_id: str | None = None) -> list[SentMessage]:
        """Everything the bots sent or replied, in order, with current content; optionally
        of one chat and/or one app's bot (None: every app)."""
        return self.state.bot_messages(chat_id, app_id)

    def unacked_frames(self) -> list[tuple[str, str | None]]:
        """(frame id, message id) of every frame sent to a client (in webhook mode: pushed)
        that got no ACK (no HTTP answer) back, in order."""
        return self.state.unacked_frames()

    def acks_of(self, message_id: str) -> list[Ack]:
        """The ACKs of every frame that carried this user's message, oldest first."""
        return [a for a in self.state.acks if a.message_id == message_id]

    def get_message(self, message_id: str) -> SentMessage | None:
        """Any message the simulator knows (the bot's or a user's), current content parsed;
        None when unknown or withdrawn."""
        rec = self.state.get_message(message_id)
        return None if rec is None else self.state.view(rec)

    def p2p_chat_of(self, open_id: str, app_id: str | None = None) -> str | None:
        """The direct chat between a person and the bot of `app_id` (None: the primary
        app's), once one exists."""
        return self.state.p2p_chat(self.apps.get(app_id).app_id, open_id)

    def reactions(self, message_id: str) -> list[str]:
        return self.state.reactions(message_id)

    def requests_count(self, path_prefix: str) -> int:
        return self.state.requests_count(path_prefix)

    def wait_connected(self, count: int = 1, timeout_s: float = 10,
                       app_id: str | None = None) -> None:
        """Wait for at least `count` live connections of `app_id` (None: of every app)."""
        self.state.wait_for(
            lambda: True if self.state.connections_of(app_id) >= count else None, timeout_s,
            lambda: (f"waiting for {count} connection(s) of app {app_id or '*'}, have "
                     f"{self.state.connections_of(app_id)}; endpoint calls: "
                     f"{self.requests_count('/callback/ws/endpoint')}"))

    def wait_for_acks(self, count: int, timeout_s: float = 10) -> list[Ack]:
        return self.state.wait_for(
            lambda: acks if len(acks := self.state.acks) >= count else None, timeout_s,
            lambda: f"waiting for {count} ACK(s), have {self.state.acks}")

    def wait_for_ack(self, frame_message_id: str, timeout_s: float = 10) -> Ack:
        """The first ACK of one frame (the id send_event/send_card_action returned)."""
        return self.state.wait_for(
            lambda: next((a for a in self.state.acks if a.frame_message_id == frame_message_id),
                         None), timeout_s,
            lambda: f"waiting for the ACK of frame {frame_message_id}, have {self.state.acks}")

    def wait_for_requests(self, path_prefix: str, count: int, timeout_s: float = 10) -> int:
        """Wait until at least `count` HTTP requests hit paths starting with `path_prefix`."""
        return self.state.wait_for(
            lambda: n if (n := self.requests_count(path_prefix)) >= count else None, timeout_s,
            lambda: f"waiting for {count} request(s) to {path_prefix}*, have "
                    f"{self.requests_count(path_prefix)}")

    def wait_for_messages(self, count: int, *, chat_id: str | None = None,
                          timeout_s: float = 10, app_id: str | None = None) -> list[SentMessage]:
        """Wait for at least `count` bot messages (of one chat / one app); returns them."""
        def describe() -> str:
            have = [(m.chat_id, m.text[:40]) for m in self.sent_messages(chat_id, app_id=app_id)]
            return (f"waiting for {count} bot message(s) in chat {chat_id or '*'} of app "
                    f"{app_id or '*'}, have {have}")

        return self.state.wait_for(
            lambda: (self.sent_messages(chat_id, app_id=app_id)
                     if self.state.count_bot_messages(chat_id, app_id) >= count else None),
            timeout_s, describe)

    def card_response(self, frame_id: str, timeout_s: float = 10) -> CardResponse:
        """Wait for the ACK of a card callback frame (the id send_card_action returned) and
        judge it as Feishu does: `late` when it came after `card_answer_limit_ms`."""
        return card_response(self.wait_for_ack(frame_id, timeout_s), self.card_answer_limit_ms)

    # faults and redelivery
    @property
    def redeliveries(self) -> int:
        """How many automatic redeliveries were sent (manual redeliver() not counted)."""
        return self.state.counter(REDELIVERIES)

    @property
    def missed_redeliveries(self) -> int:
        """Automatic redeliveries that found no client of the event's app connected: tries
        lost, as Feishu's are."""
        return self.state.counter(MISSED)

    @property
    def unanswered_pushes(self) -> dict[str, int]:
        """Webhook pushes that got no answer, by why ('timeout': none within Feishu's 3 s;
        'disconnected': the server closed the connection first)."""
        return self.state.counters(UNANSWERED)

    @property
    def pending_redeliveries(self) -> int:
        """Events still in flight: no 200 ACK yet, and not given up."""
        return self.state.counter(WATCHED)

    def wait_for_redeliveries(self, count: int, timeout_s: float = 10) -> int:
        return self.state.wait_for(
            lambda: n if (n := self.state.counter(REDELIVERIES)) >= count else None, timeout_s,
            lambda: f"waiting for {count} redelivery(ies), have {self.redeliveries}")

    def wait_redeliveries_settled(self, timeout_s: float = 10) -> int:
        """Wait until no event is watched any more; returns the redelivery count."""
        return self.state.wait_for(
            lambda: self.state.counter(REDELIVERIES) if not self.state.counter(WATCHED)
            else None, timeout_s,
            lambda: f"waiting for redelivery to settle, {self.pending_redeliveries} pending")

    @property
    def fault_counts(self) -> dict[str, int]:
        """Injected faults by kind: "5xx-json", ..., "reset"; token faults as "token:429"."""
        return self.state.counters("fault:")

    def send_attempts(self, uuid: str) -> int:
        """POSTs to create/reply that carried this uuid, faulted ones included."""
        return self.state.counter(f"send-attempt:{uuid}")
