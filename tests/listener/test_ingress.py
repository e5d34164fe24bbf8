"""`serve`'s webhook server, built from its settings: FEISHU_WEBHOOK_KEEPALIVE_S is how long
it keeps a connection that sends nothing."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from gateway.broker.publisher import Publisher
from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig
from gateway.core.settings import load_settings
from gateway.listener.ingress import webhook_server
from gateway.listener.intake import UNBOUNDED, Intake
from gateway.listener.outbox import Outbox


class Sender:  # publishing is not what this test looks at
    def send_task(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("not publishing in this test")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_keepalive_setting_bounds_a_silent_connection(
        client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"FEISHU_WEBHOOK_KEEPALIVE_S": "5", "FEISHU_WEBHOOK_ADDR": "127.0.0.1",
                        "FEISHU_WEBHOOK_PORT": str(free_port()),
                        "FEISHU_VERIFICATION_TOKEN": "a token", "FEISHU_APP_ID": "cli_a",
                        "FEISHU_APP_SECRET": "a secret"}.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(_env_file=None)
    intake = Intake(ChatStore(client, StoreConfig()), Publisher(Sender()),  # type: ignore[arg-type]
                    Outbox(), max_text_chars=100, primary_app_id="cli_a", ingest=UNBOUNDED)
    server = webhook_server(settings, intake, time.time).start()
    try:
        with socket.create_connection(("127.0.0.1", settings.webhook_port)) as silent:
            silent.settimeout(15)
            opened = time.monotonic()
            assert silent.recv(100) == b"", "closed"
            assert 4.0 < time.monotonic() - opened < 9.0, "after FEISHU_WEBHOOK_KEEPALIVE_S"
    finally:
        server.stop()
