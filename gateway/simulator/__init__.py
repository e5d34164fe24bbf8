"""A fake Feishu open platform on loopback for the real lark-oapi SDK (tests and local runs)."""

from gateway.simulator.cli import serve_forever
from gateway.simulator.simulator import Simulator
from gateway.simulator.state import Ack, SentMessage

__all__ = ["Ack", "SentMessage", "Simulator", "serve_forever"]
