"""The build context of docker/Dockerfile: .dockerignore, read as Docker reads it, keeps
every file the Dockerfile copies and leaves out what is large, local or secret."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker's matcher reads it: * and ? within one folder,
    ** across any number of them (none included), [...] a character class."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            i += 2 + pattern.startswith("/", i + 2)
            out += ".*" if i >= len(pattern) else "(.*/)?"
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i:end + 1], end + 1
        else:
            out, i = out + {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i])), i + 1
    return re.compile(out + "$")


def ignored(path: str) -> bool:
    """Whether the build context leaves `path` (from the repo root) out: the last pattern
    matching it or a folder above it decides; `!` keeps."""
    left_out, parts = False, path.split("/")
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            regex = pattern_regex(line.lstrip("!").strip("/"))
            if any(regex.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
                left_out = not line.startswith("!")
    return left_out


def copied_sources() -> list[str]:
    text = (ROOT / "docker" / "Dockerfile").read_text().replace("\\\n", " ")
    return [source for line in text.splitlines() if line.strip().upper().startswith("COPY ")
            for source in [a for a in shlex.split(line.strip()[5:])
                           if not a.startswith("--")][:-1]]


def test_the_build_context_keeps_what_the_dockerfile_copies_and_nothing_local() -> None:
    sources = copied_sources()
    assert {"pyproject.toml", "gateway", "tasks"} <= set(sources)
    for source in sources:
        top = ROOT / source
        files = [top] if top.is_file() else [
            f for f in top.rglob("*") if f.is_file() and "__pycache__" not in f.parts]
        assert files, f"COPY {source}: nothing there"
        left_out = [str(f.relative_to(ROOT)) for f in files if ignored(str(f.relative_to(ROOT)))]
        assert left_out == [], f"COPY {source}, but .dockerignore leaves these out"
    for local in (".venv", ".venv/bin/python", ".git/HEAD", ".env", "docker/.env",
                  "gateway/__pycache__/settings.cpython-311.pyc", "bench/results/run.json",
                  "feishu_gateway.egg-info/PKG-INFO", ".mypy_cache/3.11/x.json", "tests"):
        assert ignored(local), f"{local} goes into the build context"
