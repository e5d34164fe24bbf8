"""Feishu's clock as the open API client reads it from its answers' Date headers."""

from __future__ import annotations

from pydantic import SecretStr

from gateway.feishu.outbound.openapi import OpenApi


def test_feishus_clock_read_from_date_headers_never_jumps_back() -> None:
    """Each Date is to the second (up to a second behind): the reading furthest ahead is
    kept, so catch-up's gap on Feishu's clock never sees a false one; a Date far behind is
    Feishu's clock stepping back, taken as it is."""
    api = OpenApi("http://127.0.0.1:9", "cli_x", SecretStr("s"))
    try:
        api._note_date("Mon, 07 Dec 2026 08:00:01 GMT")
        first = api.feishu_now_ms()
        api._note_date("Mon, 07 Dec 2026 08:00:00 GMT")  # a second behind: kept as it was
        assert first is not None and (api.feishu_now_ms() or 0) >= first
        api._note_date("Mon, 07 Dec 2026 08:00:30 GMT")
        assert (api.feishu_now_ms() or 0) >= first + 29_000
        api._note_date("Mon, 07 Dec 2026 07:00:00 GMT")  # Feishu's own clock stepped back
        assert (api.feishu_now_ms() or 0) < first
    finally:
        api.close()
