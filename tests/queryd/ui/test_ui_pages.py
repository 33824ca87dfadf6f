"""The web view's server-rendered pages (no browser): the log list, the plain timeline and
one event, the app shell; bad URL input as a page naming it; log content escaped; deleted
content never shown; the page CSP; nothing but reads."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import Seeded, in_process, seed
from fastapi.testclient import TestClient

from producers.memory import Memory
from schemas.audit import Message

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


@pytest.fixture(scope="module")
def seeded_ui(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    location = str(tmp_path_factory.mktemp("ui") / "memory-db")
    seeded = seed(location)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="mallory", content=XSS, actor="agent:x"))
    return seeded


@pytest.fixture(scope="module")
def ui(seeded_ui: Seeded) -> Iterator[TestClient]:
    with in_process([seeded_ui.location]) as client:
        yield client


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", html)


def test_index_lists_the_served_logs(ui: TestClient, seeded_ui: Seeded) -> None:
    got = ui.get("/ui/")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/html")
    assert f'href="/ui/logs/{seeded_ui.name}"' in got.text
    assert ui.get("/ui", follow_redirects=False).headers["location"] == "/ui/"


def test_timeline_escapes_content_and_hides_deleted_text(ui: TestClient, seeded_ui: Seeded) -> None:
    got = ui.get(f"/ui/logs/{seeded_ui.name}/timeline")
    assert got.status_code == 200
    csp = got.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "<script>window.__xss" not in got.text and "&lt;script&gt;window.__xss" in got.text
    assert "<img src=x" not in got.text
    assert "the cat sat on the mat" in got.text
    assert "the cat is black" not in got.text  # deleted at seq 5
    assert f"deleted at seq {seeded_ui.deletion_seq}: user asked" in got.text
    # as of seq 4, before its deletion, it is still not shown: it was deleted later
    early = ui.get(f"/ui/logs/{seeded_ui.name}/timeline", params={"seq": 4})
    assert "the cat is black" not in early.text and "weather" in early.text
    assert "deleted at seq 5 (later): user asked" in early.text
    assert "a cat document" in early.text


def test_timeline_filters_and_pages_by_links(ui: TestClient, seeded_ui: Seeded) -> None:
    name = seeded_ui.name
    first = ui.get(f"/ui/logs/{name}/timeline", params={"kind": "message", "limit": 2})
    rows = re.findall(r'<tr class="kind-(\w+)">', first.text)
    assert rows == ["message", "message"]
    older = re.search(r'<a rel="prev" href="([^"]+)"', first.text)
    assert older is not None
    page = ui.get(f"/ui/logs/{name}/timeline" + older.group(1).replace("&amp;", "&"))
    assert page.status_code == 200
    assert "dogs chase cats" in page.text and "mallory" not in page.text
    by_actor = ui.get(f"/ui/logs/{name}/timeline", params={"actor": "agent:x"})
    assert re.findall(r'<tr class="kind-(\w+)">', by_actor.text) == ["message"]
    by_text = ui.get(f"/ui/logs/{name}/timeline", params={"text": "SUNNY"})
    assert "weather is sunny today" in by_text.text and "dogs" not in by_text.text


def test_event_page_and_a_deleted_event(ui: TestClient, seeded_ui: Seeded) -> None:
    name = seeded_ui.name
    shown = ui.get(f"/ui/logs/{name}/events/{seeded_ui.messages[0].id}")
    assert shown.status_code == 200 and "the cat sat on the mat" in shown.text
    gone = ui.get(f"/ui/logs/{name}/events/{seeded_ui.deleted_id}")
    assert gone.status_code == 200
    assert "the cat is black" not in gone.text
    assert "Deleted at seq" in _text(gone.text) and "Its content is not shown" in gone.text


@pytest.mark.parametrize(
    ("path", "params", "status", "message"),
    [
        ("/ui/logs/nope", {}, 404, "log: unknown log 'nope' (serving: memory-db)"),
        ("/ui/logs/nope/timeline", {}, 404, "log: unknown log 'nope'"),
        ("/ui/logs/{log}/timeline", {"seq": "999"}, 422, "seq: 999 is past the log's head"),
        ("/ui/logs/{log}/timeline", {"seq": "abc"}, 422, "seq: expected an integer, got 'abc'"),
        ("/ui/logs/{log}/timeline", {"kind": "zzz"}, 422, "kind: expected one of message,"),
        ("/ui/logs/{log}/timeline", {"after_seq": "1e9"}, 422, "after_seq: expected an integer"),
        ("/ui/logs/{log}/timeline", {"limit": "0"}, 422, "limit: expected 1 to 10000, got 0"),
        ("/ui/logs/{log}/timeline", {"text": "x" * 1001}, 422, "text: expected at most 1000"),
        (
            "/ui/logs/{log}/timeline",
            {"after_seq": "1", "before_seq": "3"},
            422,
            "before_seq: give after_seq or before_seq",
        ),
        ("/ui/logs/{log}/events/xyz", {}, 422, "event_id: expected a UUID, got 'xyz'"),
        (
            "/ui/logs/{log}/events/00000000-0000-0000-0000-000000000000",
            {},
            404,
            "event_id: no event",
        ),
    ],
)
def test_bad_url_input_is_a_page_naming_it(
    ui: TestClient, seeded_ui: Seeded, path: str, params: dict[str, str], status: int, message: str
) -> None:
    got = ui.get(path.format(log=seeded_ui.name), params=params)
    assert got.status_code == status
    assert got.headers["content-type"].startswith("text/html")
    assert message in got.text.replace("&#39;", "'")
    assert "Traceback" not in got.text and 'role="alert"' in got.text


def test_the_view_adds_no_write_and_serves_only_its_files(
    ui: TestClient, seeded_ui: Seeded
) -> None:
    for route in ui.app.routes:  # type: ignore[attr-defined]
        if getattr(route, "path", "").startswith("/ui"):
            assert getattr(route, "methods", None) in (None, {"GET", "HEAD"}, {"GET"}), route
    assert ui.post(f"/ui/logs/{seeded_ui.name}").status_code == 405
    assert ui.get("/ui/static/app.js").status_code == 200
    assert ui.get("/ui/static/../router.py").status_code == 404
    assert ui.get("/ui/static/%2e%2e/router.py").status_code == 404


def test_static_files_name_no_internet_address() -> None:
    """Nothing is fetched from the internet at run time: no script, style or page of the
    view names an http(s) address other than its own."""
    root = Path(__file__).resolve().parents[3] / "queryd" / "ui"
    for path in list(root.rglob("*.js")) + list(root.rglob("*.css")) + list(root.rglob("*.html")):
        text = path.read_text()
        found = re.findall(r"https?://[^\s\"')]+", text)
        assert [u for u in found if not u.startswith("http://www.w3.org/")] == [], path
