"""The LLM web page in a real browser when the query service requires a bearer token
(zerotrace_query/api_auth.py): opened once as /?token=..., the server redirects to the page
without the token and sets its session cookie, and headless Chromium then loads the page, its
script and style and every API fetch on that cookie alone: the whole page works, as it does
without a token (tests/e2e/test_web_page.py, whose browser and checks this reuses).
Needs Debian's Chromium: `apt-get install -y chromium`.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.e2e.test_web_page import _inspect, browser, check_full_page, fill
from tests.unit.test_llm_query_documents import realistic_requests
from zerotrace.codec import AvroCodec
from zerotrace.store_duckdb import DuckDBStore
from zerotrace_query.http_api import HttpApi

__all__ = ["browser"]  # the fixture, used by name below

TOKEN = "e2e-token-7f3a"


def test_the_page_opened_once_with_the_token_runs_on_its_cookie(
    browser: str, tmp_path: Path, codec: AvroCodec
) -> None:
    requests = realistic_requests(time.time_ns(), 300, span_s=600)
    store = DuckDBStore()
    try:
        fill(store, codec, requests)
        http = HttpApi(store, port=0, token=TOKEN).start()
        try:
            page = f"{http.url}/?token={TOKEN}"
            report = asyncio.run(_inspect(browser, page, tmp_path / "token.png", True))
        finally:
            http.stop()
    finally:
        store.close()
    check_full_page(report, requests)  # also: the address is ?model=..., the token gone
