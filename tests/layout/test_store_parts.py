"""Which process runs which of a chat's steps reads off the code: the store's parts are
named at every call (`store.inbox.ingest`, `store.turns.start`), and these rules hold. The
listener takes messages in, stops turns and records what people do; it never runs a
worker's step of a turn (it may ask whether a turn still holds its chat). A worker never
takes a message in."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
TURN_READS = frozenset({"holds", "holds_many", "interrupted", "asked_to_stop"})


def store_calls(source: str) -> list[tuple[str, str, int]]:
    """(part, step, line) of each `<…store>.<part>.<step>(...)` call."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        part = node.func.value
        if not isinstance(part, ast.Attribute):
            continue
        owner = part.value
        name = owner.attr if isinstance(owner, ast.Attribute) else \
            owner.id if isinstance(owner, ast.Name) else ""
        if name.endswith("store"):
            found.append((part.attr, node.func.attr, node.lineno))
    return found


def offences(package: str, refused: dict[str, frozenset[str] | None]) -> list[str]:
    """The calls under gateway/`package` of a refused part (None: every step of it; else
    every step but those listed)."""
    out = []
    for module in sorted((GATEWAY / package).rglob("*.py")):
        for part, step, line in store_calls(module.read_text(encoding="utf-8")):
            if part not in refused:
                continue
            allowed = refused[part]
            if allowed is None or step not in allowed:
                out.append(f"{module.relative_to(GATEWAY)}:{line} {part}.{step}")
    return out


def test_the_listener_never_runs_a_workers_step() -> None:
    assert offences("listener", {"turns": TURN_READS}) == []


def test_a_worker_never_takes_a_message_in() -> None:
    assert offences("worker", {"inbox": None}) == []


def test_the_rule_sees_a_step_taken_where_it_does_not_belong() -> None:
    planted = "def f(self):\n    self._store.turns.start(turn, 't', 'w')\n" \
              "    self._store.turns.holds_many([turn])\n"
    calls = store_calls(planted)
    assert calls == [("turns", "start", 2), ("turns", "holds_many", 3)]
    assert [c for c in calls if c[1] not in TURN_READS] == [("turns", "start", 2)]
