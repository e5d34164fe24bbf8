"""The settings of replies."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from gateway.core.settings_part import SettingsPart


class ReplySettings(SettingsPart):
    """How an answer is shown and sent: its format, streaming, chunks, retries, the send
    quota and the typing reaction."""

    doc_title: ClassVar[str] = "Replies"
    doc_link: ClassVar[str] = "replies-and-access.md#replies"

    reply_format: Literal["auto", "text", "post", "card"] = Field(
        "auto", validation_alias="FEISHU_REPLY_FORMAT")
    """auto: plain text as text, markdown as a post, code blocks or tables as a card."""
    streaming: bool = Field(True, validation_alias="FEISHU_STREAMING")
    """An agent that returns its answer in pieces is shown as it writes: in a card, or (reply
    format text or post) in one message edited in place."""
    stream_interval_ms: int = Field(300, validation_alias="FEISHU_STREAM_INTERVAL_MS", ge=50)
    """A streamed answer's text is shown at most this often."""
    reply_chunk_chars: int = Field(4000, validation_alias="GATEWAY_REPLY_CHUNK_CHARS", ge=200,
                                   le=30_000)
    """A longer reply is sent as several messages labelled (i/n)."""
    reply_retry_budget_s: float = Field(120.0, validation_alias="GATEWAY_REPLY_RETRY_BUDGET_S",
                                        gt=0)
    """How long a reply is retried before it is given up (the chat's next turn
    waits meanwhile); a worker's warm shutdown cuts it short and hands the reply back."""
    send_rate_per_s: float = Field(50.0, validation_alias="FEISHU_SEND_RATE_PER_S", ge=0)
    """Sends per second per app, shared by every worker through Redis (0: no limit)."""
    send_rate_per_min: float = Field(1000.0, validation_alias="FEISHU_SEND_RATE_PER_MIN", ge=0)
    """Sends per minute per app."""
    chat_send_rate_per_s: float = Field(5.0, validation_alias="FEISHU_CHAT_SEND_RATE_PER_S",
                                        ge=0)
    """Sends per second to one chat."""
    typing: bool = Field(True, validation_alias="FEISHU_TYPING")
    """A reaction on the user's message while its turn runs (and a mark when it failed)."""
    typing_emoji: str = Field("Typing", validation_alias="FEISHU_TYPING_EMOJI", min_length=1)
    """The typing reaction's emoji_type."""
    failure_emoji: str = Field("CrossMark", validation_alias="FEISHU_FAILURE_EMOJI")
    """The failure mark's emoji_type (empty: none)."""
