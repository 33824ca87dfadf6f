"""The web view's routes: the app shell, and plain-HTML pages that need no JavaScript.

- ``GET /ui/``: the served logs;
- ``GET /ui/logs/{log}``: the app (its script reads the API; views and seq in the URL);
- ``GET /ui/logs/{log}/timeline``: the timeline as plain HTML, filtered and paged by links;
- ``GET /ui/logs/{log}/events/{event_id}``: one event as plain HTML;
- ``/ui/static/...``: the script, the style sheet, vendored libraries (none fetched from
  the internet at run time).

What these pages show is what the API answers (`select_events`, `MemoryState.get`), with
content deleted at the head shown as deleted, never its text, even as of a seq before
its deletion. Bad input in the URL (an unknown log, a
seq past the head, a malformed filter) is an HTML page naming it, with the status the API
would give; never a trace. Every page is sent with a Content-Security-Policy that allows
only this origin's own scripts and styles, so log content can never run as script.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode
from uuid import UUID

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.staticfiles import StaticFiles

from queryd.audit.events import MAX_TEXT_FILTER, event_text, select_events
from queryd.daemon.dependencies import ServedLog, daemon_of
from queryd.daemon.errors import ApiError
from queryd.daemon.routes.service import summary
from queryd.daemon.settings import MAX_PAGE
from schemas.audit import EVENT_KINDS

__all__ = ["install", "router"]

log = logging.getLogger("memstream.queryd.ui")

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TIMELINE_PAGE = 100

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)

_templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

router = APIRouter(include_in_schema=False)


class BadInput(Exception):
    """A URL parameter the page cannot use: its name and what was expected."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def page(name: str, http_status: int = 200, **values: Any) -> HTMLResponse:
    """The template `name` rendered with `values`, as an HTML answer with the page CSP."""
    body = _templates.get_template(name).render(**values)
    return HTMLResponse(
        body,
        status_code=http_status,
        headers={
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin",
        },
    )


def error_page(status: int, message: str, log_name: str | None = None) -> HTMLResponse:
    return page("error.html", status, status=status, message=message, log_name=log_name)


def _int(params: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    """The integer URL parameter `name` (absent or empty: None), or a BadInput naming it."""
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(422, f"{name}: expected an integer, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise BadInput(422, f"{name}: expected {low} to {high}, got {value}")
    return value


def _text(params: Mapping[str, str], name: str, limit: int = MAX_TEXT_FILTER) -> str | None:
    raw = params.get(name, "")
    if len(raw) > limit:
        raise BadInput(422, f"{name}: expected at most {limit} characters, got {len(raw)}")
    return raw or None


async def _served(request: Request, log_name: str) -> ServedLog:
    daemon = daemon_of(request)
    handle = daemon.registry.get(log_name)
    if handle is None:
        served = ", ".join(sorted(daemon.registry.handles)) or "none"
        raise BadInput(404, f"log: unknown log {log_name!r} (serving: {served})")
    return ServedLog(handle, daemon)


async def _state_of(served: ServedLog) -> Any:
    try:
        return await served.state(None)
    except ApiError as exc:
        raise BadInput(exc.status, exc.message) from None


@router.get("/ui")
async def ui_root() -> Response:
    return RedirectResponse("/ui/", status_code=308)


@router.get("/ui/")
async def index(request: Request) -> Response:
    logs = [summary(h) for h in daemon_of(request).registry.handles.values()]
    return page("index.html", logs=logs)


@router.get("/ui/logs/{log_name}")
async def app_shell(request: Request, log_name: str) -> Response:
    try:
        await _served(request, log_name)
    except BadInput as exc:
        return error_page(exc.status, exc.message)
    return page("app.html", log_name=log_name)


@router.get("/ui/logs/{log_name}/timeline")
async def timeline(request: Request, log_name: str) -> Response:
    try:
        served = await _served(request, log_name)
        state = await _state_of(served)
        params = request.query_params
        head = -1 if state.memory.last_seq is None else state.memory.last_seq
        seq = _int(params, "seq", -1, 2**62)
        if seq is not None and seq > head:
            raise BadInput(422, f"seq: {seq} is past the log's head ({head})")
        kind = _text(params, "kind")
        if kind is not None and kind not in EVENT_KINDS:
            raise BadInput(422, f"kind: expected one of {', '.join(EVENT_KINDS)}, got {kind!r}")
        filters = {
            "kind": kind,
            "actor": _text(params, "actor"),
            "session": _text(params, "session"),
            "text": _text(params, "text"),
        }
        after_seq = _int(params, "after_seq", -1, 2**62)
        before_seq = _int(params, "before_seq", 0, 2**62)
        limit = _int(params, "limit", 1, MAX_PAGE) or TIMELINE_PAGE
        if after_seq is None and before_seq is None:
            before_seq = (head if seq is None else seq) + 1  # the newest page by default
        newest = state.memory  # deleted there is shown as deleted, even as of an earlier seq
        try:
            found = select_events(
                newest,
                kind=kind,
                session_id=filters["session"],
                actor=filters["actor"],
                text=filters["text"],
                after_seq=after_seq,
                before_seq=before_seq,
                up_to_seq=seq,
                limit=limit,
            )
        except ValueError as exc:
            raise BadInput(422, str(exc)) from None
    except BadInput as exc:
        return error_page(exc.status, exc.message, log_name)
    kept = {k: v for k, v in {**filters, "seq": seq}.items() if v is not None}

    def link(**where: int) -> str:
        return "?" + urlencode({**kept, **where})

    rows = [
        {
            "event": e,
            "deletion": newest.deleted.get(e.id),
            "erasure": newest.erasure_of(e.id),
            "said": event_text(e) if e.id not in newest.deleted else None,
        }
        for e in found.events
    ]
    return page(
        "timeline.html",
        log_name=log_name,
        rows=rows,
        head=head,
        seq=seq,
        filters=filters,
        kinds=EVENT_KINDS,
        older=None if found.prev_before_seq is None else link(before_seq=found.prev_before_seq),
        newer=None if found.next_after_seq is None else link(after_seq=found.next_after_seq),
        app_link=f"/ui/logs/{quote(log_name, safe='')}" + ("?" + urlencode(kept) if kept else ""),
    )


@router.get("/ui/logs/{log_name}/events/{event_id}")
async def event_page(request: Request, log_name: str, event_id: str) -> Response:
    try:
        served = await _served(request, log_name)
        state = await _state_of(served)
        try:
            key = UUID(event_id)
        except ValueError:
            raise BadInput(422, f"event_id: expected a UUID, got {event_id[:60]!r}") from None
        event = state.memory.get(key)
        if event is None:
            raise BadInput(404, f"event_id: no event {event_id!r} in log {log_name!r}")
    except BadInput as exc:
        return error_page(exc.status, exc.message, log_name)
    deletion = state.memory.deleted.get(event.id)
    erasure = state.memory.erasure_of(event.id)
    fields = {
        k: v
        for k, v in event.model_dump(mode="json").items()
        if deletion is None or k not in {"content", "text", "name", "sha256"}
    }
    return page(
        "event.html",
        log_name=log_name,
        event=event,
        deletion=deletion,
        erasure=erasure,
        fields=fields,
        said=None if deletion is not None or erasure is not None else event_text(event),
    )


def install(app: FastAPI) -> None:
    """Mount the web view on `app`: its routes and its static files."""
    app.router.routes.extend(router.routes)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
