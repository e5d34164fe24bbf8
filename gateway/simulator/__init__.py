"""A fake Feishu open platform on loopback for the real lark-oapi SDK (tests and local runs)."""

from gateway.simulator.cli import serve_forever
from gateway.simulator.faults import SendFaults
from gateway.simulator.simulator import Simulator
from gateway.simulator.state import Ack, SentMessage

__all__ = ["Ack", "SendFaults", "SentMessage", "Simulator", "serve_forever"]
