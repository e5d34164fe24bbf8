"""The simulator's fixed settings, tokens and Feishu error codes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# Feishu error codes the simulator answers with.
CODE_BAD_REQUEST = 9499
CODE_INVALID_PARAM = 10003
CODE_BAD_SECRET = 10014
CODE_INVALID_TOKEN = 99991663
CODE_FIELD_VALIDATION = 99992402
CODE_INVALID_MESSAGE = 230001
CODE_BOT_NOT_IN_CHAT = 230002
CODE_MESSAGE_NOT_FOUND = 230011
CODE_CONTENT_TOO_LONG = 230025
CODE_NO_PERMISSION = 230027
CODE_CARD_CONTENT = 230099
"""im/v1 create/reply: "Failed to create card content" (the ext names the sub-error)."""
CODE_MESSAGE_DELETED = 230110
CODE_REACTION_NOT_FOUND = 231003
CODE_MESSAGE_MISSING = 231003
"""Reactions docs: "The message is not found, maybe not exist or deleted"."""
CODE_SYSTEM_BUSY = 1
CODE_EDIT_LIMIT = 230001
"""im/v1 message/update allows 20 edits of one message; the docs name no code of its own
for the 21st, so the simulator answers with the generic invalid-message code."""
EDITS_MAX = 20

# cardkit-v1 (card/create, card/update, card/settings, card-element/content docs).
CODE_CARD_PARAM = 10002
CODE_CARD_GENERATE = 200220
CODE_CARD_MISSING = 200740
CODE_CARD_UUID_CONFLICT = 200770
CODE_CARD_STREAMING_TIMEOUT = 200850
CODE_CARD_TOO_BIG = 200860
CODE_CARD_SETTINGS = 300122
CODE_CARD_DUPLICATE_ID = 300301
CODE_CARD_UPDATE_MULTI = 300302
CODE_CARD_SCHEMA = 300303
CODE_CARD_TOO_MANY = 300305
CODE_CARD_EMPTY = 300307
CODE_CARD_STREAMING_CLOSED = 300309
CODE_CARD_ONLY_TEXT = 300310
CODE_CARD_NOT_OWNER = 300311
CODE_CARD_ELEMENT = 300313
CODE_CARD_SEQUENCE = 300317
CARD_ELEMENTS_MAX = 200
CARD_TEXT_MAX_CHARS = 100_000
CODE_CARD_RATE_LIMIT = 99991400
"""Feishu's frequency-limit answer (HTTP 429), given to a card updated too often."""
CARD_OPS_PER_S = 10
"""Update calls one card takes per second (feishu-cards streaming-updates docs)."""
CARD_STREAMING_S = 600.0
"""Feishu closes a card's streaming mode this long after it was last turned on."""

# im/v1 message resources (message-resource/get docs).
CODE_RESOURCE_PARAM = 234001
CODE_FILE_NOT_IN_MESSAGE = 234003
CODE_RESOURCE_UNSUPPORTED = 234043

TEXT_LIMIT_BYTES = 150 * 1024
CARD_LIMIT_BYTES = 30 * 1024
"""Cards and posts (im/v1 create docs, 230025); card entities too (cardkit docs, 200860)."""
TOKEN_EXPIRE_S = 7200
FEISHU_REDELIVERY_S = (15.0, 300.0, 3600.0, 21_600.0)
"""When Feishu sends an event that was not answered 200 (an ACK, or a push's HTTP answer)
again: each delay after the try before it; after the last, never (feishu-limits)."""
CARD_ANSWER_LIMIT_MS = 3000.0
"""Feishu waits this long for the answer to a card callback, then shows the clicker an error."""


@dataclass(frozen=True)
class SimConfig:
    """Identity of the fake app and the ClientConfig handed to long-connection clients."""

    app_id: str = "cli_sim_app"
    app_secret: str = "sim-secret"
    bot_open_id: str = "ou_sim_bot"
    app_name: str = "Simulator Bot"
    service_id: int = 33554678
    ping_interval_s: int = 120
    reconnect_interval_s: int = 1
    reconnect_nonce_s: int = 0

    def client_config(self) -> dict[str, int]:
        """All four ClientConfig fields; a missing one breaks the SDK's ping/reconnect loops."""
        return {
            "PingInterval": self.ping_interval_s,
            "ReconnectCount": -1,
            "ReconnectInterval": self.reconnect_interval_s,
            "ReconnectNonce": self.reconnect_nonce_s,
        }

    def tenant_token(self, generation: int) -> str:
        """The token issued for these credentials.

        Deterministic on purpose: the SDK caches tenant tokens process-wide per app_id
        and never drops them on 99991663, so a fresh simulator with the same credentials
        must accept the token an earlier one issued.
        """
        seed = f"{self.app_id}:{self.app_secret}:{generation}".encode()
        return "t-sim-" + hashlib.sha256(seed).hexdigest()[:40]
