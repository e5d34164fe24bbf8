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
CODE_MESSAGE_NOT_FOUND = 230011
CODE_CONTENT_TOO_LONG = 230025
CODE_NO_PERMISSION = 230027
CODE_REACTION_NOT_FOUND = 231003
CODE_SYSTEM_BUSY = 1

TEXT_LIMIT_BYTES = 150 * 1024
CARD_LIMIT_BYTES = 30 * 1024
TOKEN_EXPIRE_S = 7200
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
