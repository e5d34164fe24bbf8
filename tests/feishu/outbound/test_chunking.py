"""Long replies are split into renderable chunks. Pure."""

from __future__ import annotations

import pytest

from gateway.feishu.outbound.chunking import chunk_markdown, chunk_text, split_tables, tables_in
from gateway.feishu.outbound.stream_card import closed_card
from gateway.simulator.cardjson import card_size, check_card
from gateway.simulator.config import CARD_LIMIT_BYTES


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


TABLE = "| name | size |\n| --- | ---: |\n" + "\n".join(f"| row{n} | {n} |" for n in range(60))


def test_a_table_cut_between_rows_repeats_its_header() -> None:
    chunks = chunk_text(f"Sizes:\n\n{TABLE}\n\nThat is all.", 300)
    assert len(chunks) > 2
    for chunk in chunks[1:]:
        if "| row" in chunk:
            assert chunk.startswith("| name | size |\n| --- | ---: |\n"), chunk
    rows = [line for chunk in chunks for line in chunk.splitlines() if "| row" in line]
    assert rows == [f"| row{n} | {n} |" for n in range(60)]  # each row once, in order
    assert all(len(c) <= 300 + len("| name | size |\n| --- | ---: |\n") for c in chunks)


def test_tables_inside_code_fences_are_not_tables() -> None:
    text = "```\n| a | b |\n| --- | --- |\n| 1 | 2 |\n```"
    assert tables_in(text) == []
    assert len(tables_in(f"{TABLE}\n\n{text}")) == 1


def test_more_tables_than_a_card_holds_are_split_between_tables() -> None:
    small = "| a | b |\n| --- | --- |\n| 1 | 2 |"
    text = "\n\ntext\n\n".join([small] * 9)
    pieces = split_tables(text, 4)
    assert [len(tables_in(p)) for p in pieces] == [4, 4, 1]
    assert " ".join("".join(pieces).split()).count("| 1 | 2 |") == 9


def test_several_chunks_are_labelled_and_stay_within_the_limit() -> None:
    text = "\n\n".join(f"paragraph {n} " + "word " * 30 for n in range(20))
    chunks = chunk_markdown(text, 400)
    assert len(chunks) > 2
    assert all(len(c) <= 400 for c in chunks)
    assert [c.rsplit("\n", 1)[1] for c in chunks] == [
        f"({n}/{len(chunks)})" for n in range(1, len(chunks) + 1)]
    assert chunk_markdown("short", 400) == ["short"]


def test_a_long_cjk_answer_is_cut_so_each_card_stays_under_feishus_30_kb() -> None:
    """30,000 characters a chunk (the highest GATEWAY_REPLY_CHUNK_CHARS) of Chinese is 90 KB:
    cut by bytes too, each chunk's card, closed with 30 steps and a mark, is accepted."""
    text = "\n\n".join("这是一个很长的回答，用来测试卡片的大小限制。" * 40 for _ in range(60))
    chunks = chunk_markdown(text, 30_000)
    assert len(chunks) > 1 and "".join(chunks).count("这") == text.count("这")
    steps = [(f"步骤 {n}: 搜索知识库里的相关文档和资料", 1.5) for n in range(30)]
    for chunk in chunks:
        card = closed_card(chunk, element_id="answer", footer="⏹ Stopped.", steps=steps)
        check_card(card)  # the simulator's check of Feishu's limits (200860 past 30 KB)
        assert card_size(card) <= CARD_LIMIT_BYTES
