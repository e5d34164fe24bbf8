"""The terminal demo: multi-line messages, replies in full, its log folder cleaned up."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.demo import gather


@pytest.mark.parametrize(("typed", "messages"), [
    (["hello\n", "\n", "world\n"], ["hello", "world"]),
    (["first \\\n", "  second\n"], ["first \n  second"]),
    (["```python\n", "def f():\n", "\n", "    return 1\n", "```\n", "after\n"],
     ["```python\ndef f():\n\n    return 1\n```", "after"]),
    (["look: \\\n", "```\n", "x  = 1\n", "```\n"], ["look: \n```\nx  = 1\n```"]),
    (["```inline```\n", "next\n"], ["```inline```", "next"]),
    (["```\n", "never closed\n"], ["```\nnever closed"]),
    (["   \n", "\n"], []),
])
def test_terminal_lines_become_messages_with_their_layout(typed: list[str],
                                                          messages: list[str]) -> None:
    assert list(gather(typed)) == messages


def test_the_demo_answers_a_code_block_and_a_long_line_in_full_and_cleans_up(
        tmp_path: Path) -> None:
    long_line = "x" * 5000
    typed = f"```python\ndef f():\n    return 1\n```\n{long_line}\n"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REDIS_", "FEISHU_", "GATEWAY_", "CELERY_"))}
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "demo", "--port", "0"],
                            input=typed,
                            capture_output=True, text=True, timeout=110, cwd=str(tmp_path),
                            env={**env, "NO_PROXY": "127.0.0.1,localhost"})
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "bot: echo: ```python\n     def f():\n         return 1\n     ```\n" in out
    echoed = "".join(re.findall(r"bot: (?:echo: )?(x+)", out))
    assert echoed == long_line, "the long reply came in pieces, every one printed"
    assert re.search(r"web chat: open http://127\.0\.0\.1:\d+/ ", out), out
    logs = re.search(r"logs in (\S+) \(removed at exit", out)
    assert logs is not None, out
    assert not Path(logs.group(1)).exists()
