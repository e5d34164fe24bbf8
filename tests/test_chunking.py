"""Long replies are split into renderable chunks. Pure."""

from __future__ import annotations

import pytest

from gateway.chunking import chunk_text


def test_short_text_is_one_chunk() -> None:
    assert chunk_text("hello", 100) == ["hello"]


def test_cuts_at_paragraphs_then_lines_and_keeps_everything() -> None:
    text = "\n\n".join(f"paragraph {n} " + "word " * 30 for n in range(20))
    chunks = chunk_text(text, 400)
    assert all(len(c) <= 400 for c in chunks) and len(chunks) > 1
    assert all(c.startswith("paragraph") for c in chunks)
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


def test_a_code_fence_is_closed_and_reopened_across_a_cut() -> None:
    code = "\n".join(f"print({n})" for n in range(200))
    text = f"Here:\n```python\n{code}\n```\nDone."
    chunks = chunk_text(text, 300)
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.count("```") % 2 == 0, chunk
        assert len(chunk) <= 300 + len("```python\n")
    assert all(c.startswith("```python\n") for c in chunks[1:-1])
    joined = "".join(chunks)
    assert all(f"print({n})" in joined for n in range(200))


def test_text_without_spaces_is_cut_hard() -> None:
    chunks = chunk_text("x" * 1000, 100)
    assert [len(c) for c in chunks] == [96] * 10 + [40]


def test_limit_too_small_is_refused() -> None:
    with pytest.raises(ValueError):
        chunk_text("x", 10)
