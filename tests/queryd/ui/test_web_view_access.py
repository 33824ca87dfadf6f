"""The web view in a real browser (chromium) when queryd runs with --tokens: the pasted
token signs the browser in with an HttpOnly cookie, the app's fetches and its live stream
then work, and nothing of the log is shown before it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from daemon_support import seed, serve

from producers.keys.token_store import TokenStore
from producers.memory import Memory
from schemas.audit import Message

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def page() -> Iterator[Any]:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("chromium is not installed: scripts/test.sh installs it")
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=found, args=["--no-sandbox", "--disable-gpu"])
        try:
            opened = browser.new_context().new_page()
            errors: list[str] = []
            opened.on("pageerror", lambda exc: errors.append(str(exc)))
            yield opened
            assert errors == [], errors
        finally:
            browser.close()


def test_signing_in_then_reading_and_following_live(page: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "memory-db")
    seeded = seed(location)
    tokens = tmp_path / "tokens.db"
    with TokenStore.create(tokens) as store:
        token, _ = store.issue(
            seeded.name, "read", "agent:viewer", datetime.now(UTC) + timedelta(hours=1)
        )
    with serve([location], "--tokens", str(tokens), "--sse-keepalive", "1") as base:
        app = f"{base}/ui/logs/{seeded.name}"
        page.goto(app)
        assert page.locator("#login").is_visible()  # a sign-in form, not the log
        assert "dogs chase cats" not in page.content()
        page.fill("#token", token[:-1] + ("A" if token[-1] != "A" else "B"))
        page.click("#login button")
        assert "token: unknown" in page.inner_text("#problem")
        page.fill("#token", token)
        page.click("#login button")
        page.wait_for_url(app)
        page.wait_for_selector("table.timeline")
        assert "dogs chase cats" in page.inner_text("#view")
        cookie = next(c for c in page.context.cookies() if c["name"] == "memstream_token")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.evaluate("document.cookie") == ""  # the page's scripts cannot read it
        page.wait_for_function(
            "() => document.querySelector('#live-status').textContent === 'live'"
        )
        with Memory(location) as memory:
            stored = memory.add_message(Message(speaker="agent", content="after signing in"))
        page.wait_for_selector(f"table.timeline tr[data-seq='{stored.seq}']", timeout=20_000)
        # the plain timeline too, and the index shows the granted log
        page.goto(f"{app}/timeline")
        assert "after signing in" in page.inner_text("body")
        page.goto(f"{base}/ui/")
        assert seeded.name in page.inner_text("body")
