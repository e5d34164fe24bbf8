"""A fake Feishu open platform on loopback for the real lark-oapi SDK (tests and local runs)."""

from gateway.simulator.cards import CardView
from gateway.simulator.cli import serve_forever
from gateway.simulator.faults import SendFaults
from gateway.simulator.records import Ack, CardResponse, SentMessage
from gateway.simulator.server import NoBotConnected
from gateway.simulator.simulator import Simulator

__all__ = ["Ack", "CardResponse", "CardView", "NoBotConnected", "SendFaults", "SentMessage",
           "Simulator", "serve_forever"]
