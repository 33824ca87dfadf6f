"""Access control of the daemon: bearer tokens checked against the token store, per route.

On only with ``serve --tokens PATH`` (`DaemonSettings.tokens`); without it the daemon
serves every route to anyone, as before, and says so once at startup.

What each path needs (`requirement`), deny by default:

- open: ``/healthz``, ``/readyz``, ``/metrics`` (probes and scrapers carry no token; they
  name the served logs and their positions, never content), the OpenAPI document and its
  pages (``/openapi.json``, ``/docs``, ``/redoc``), the web view's static files and its
  sign-in page (``/ui/login``, ``/ui/logout``);
- ``/logs/NAME`` and everything under it: scope ``read`` on log NAME, except
  ``POST /logs/NAME/recall`` (it appends a Recall): scope ``recall``; the web view's pages
  of a log (``/ui/logs/NAME...``): ``read`` on NAME;
- anything else (``/logs``, ``/ui/``, an unknown path): any valid token; the lists of logs
  show only the log the token grants.

A token comes in ``Authorization: Bearer <token>``, or, for the web view, in the HttpOnly,
SameSite=Strict cookie ``memstream_token`` that ``POST /ui/login`` sets (a fetch or a page
load cannot set a header of its own). A request authenticated by the cookie with a method
other than GET or HEAD must carry an ``Origin`` naming this daemon's own host (the browser
sends it), so another site cannot make a signed-in browser recall. Tokens in a query
string are not read (they would end up in access logs and browser history).

Refusals are the daemon's error JSON: 401 with ``WWW-Authenticate: Bearer`` (missing,
malformed, unknown, expired or revoked token), 403 (another log, a scope too low, an
actor that is not the token's agent), 503 while the token store cannot be read (fail
closed: a revocation must not be missed). ``detail`` names what is missing: ``{"missing":
"token" | "log" | "scope" | "actor", ...}``. The token itself is never in an answer, a log
line or an exception.

The records are read from the store at start and again whenever the file changes (checked
every `refresh_interval`, 1 s by default): a token created or revoked by `memstream tokens`
takes effect in every daemon sharing the file within that time.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from producers.keys.token_store import TokenStore, TokenStoreError
from queryd.daemon.jsonlog import Throttle
from schemas.tokens import (
    AccessError,
    Grant,
    ScopeRefused,
    TokenRecord,
    TokenRefused,
    authorize,
    check_token,
)
from schemas.tokens import Scope as TokenScope

__all__ = [
    "ANY",
    "COOKIE",
    "GRANT_KEY",
    "OPEN",
    "AccessControl",
    "Requirement",
    "StoreUnreadable",
    "TokenVerifier",
    "acting_agent",
    "granted_log",
    "requirement",
]

log = logging.getLogger("memstream.queryd.tokens")

COOKIE = "memstream_token"
GRANT_KEY = "memstream.grant"  # the ASGI scope key holding a request's Grant
_OPEN_PATHS = frozenset(
    {
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/ui",
        "/ui/login",
        "/ui/logout",
    }
)
_SAFE = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a request needs: nothing (`open`), any valid token (`log` None), or `scope`
    on `log`."""

    open: bool = False
    log: str | None = None
    scope: TokenScope = "read"


OPEN = Requirement(open=True)
ANY = Requirement()


def requirement(method: str, path: str) -> Requirement:
    """What a request of `method` on the (decoded) `path` needs; see the module docstring."""
    if path in _OPEN_PATHS or path.startswith("/ui/static/"):
        return OPEN
    parts = path.split("/")
    if len(parts) >= 3 and parts[1] == "logs":
        needed: TokenScope = "recall" if method == "POST" and parts[3:] == ["recall"] else "read"
        return Requirement(log=parts[2], scope=needed)
    if len(parts) >= 4 and parts[1] == "ui" and parts[2] == "logs":
        return Requirement(log=parts[3], scope="read")
    return ANY


class StoreUnreadable(Exception):
    """The token store could not be read at the last attempt: nothing is authorised."""


class TokenVerifier:
    """The token records of one store, kept current by a thread, and the check of a
    presented token against them."""

    def __init__(self, store: TokenStore, refresh_interval: float = 1.0) -> None:
        self.store = store
        self.refresh_interval = refresh_interval
        self._records: dict[str, TokenRecord] = {}
        self._version: int | None = None
        self._failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._throttle = Throttle(log, period=60.0)
        self.refresh()
        if self._failure is not None:
            raise TokenStoreError(self._failure)

    @classmethod
    def open(cls, path: str, refresh_interval: float = 1.0) -> TokenVerifier:
        """The verifier of the store at `path` (which must exist: a `TokenStoreError`)."""
        return cls(TokenStore.open(path), refresh_interval)

    @property
    def path(self) -> str:
        return self.store.path

    def refresh(self, force: bool = False) -> None:
        """Reload the records when the file changed since the last load (or `force`). A
        failure makes every check a 503 until a later refresh succeeds."""
        try:
            version = self.store.version()
            if force or version != self._version or self._failure is not None:
                loaded = self.store.load()
                self._records, self._version = loaded.records, version
                for token_id in loaded.damaged:
                    self._throttle.warning(
                        f"damaged:{token_id}",
                        "token store %s: the row of token %s is damaged; it grants nothing",
                        self.path,
                        token_id,
                    )
            if self._failure is not None:
                log.warning("token store %s: readable again", self.path)
            self._failure = None
        except TokenStoreError as exc:
            if self._failure is None:
                log.error("%s; every request needing a token is refused (503)", exc)
            self._failure = str(exc)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="queryd-tokens", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)

    def close(self) -> None:
        self.stop()
        self.store.close()

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_interval):
            self.refresh()

    def check(self, presented: str | None) -> Grant:
        """The grant of the presented token; `TokenRefused` naming why not, or
        `StoreUnreadable` when the store could not be read."""
        if self._failure is not None:
            raise StoreUnreadable(self._failure)
        return check_token(presented, self._records, datetime.now(UTC))


def _header(scope: Scope, name: bytes) -> list[bytes]:
    return [v for k, v in scope.get("headers", ()) if k == name]


def _cookie(scope: Scope) -> str | None:
    """The value of the ``memstream_token`` cookie, if one was sent."""
    for raw in _header(scope, b"cookie"):
        for part in raw.decode("latin-1").split(";"):
            name, sep, value = part.strip().partition("=")
            if sep and name == COOKIE:
                return value.strip().strip('"')
    return None


def _bearer(scope: Scope) -> tuple[str | None, bool]:
    """(the presented token, whether it came in the cookie); a `TokenRefused` for an
    Authorization header that is not one ``Bearer <token>``."""
    values = _header(scope, b"authorization")
    if not values:
        return _cookie(scope), True
    if len(values) > 1:
        raise TokenRefused("header.Authorization: sent more than once", "token")
    kind, _, token = values[0].decode("latin-1").strip().partition(" ")
    if kind.lower() != "bearer" or not token.strip():
        raise TokenRefused("header.Authorization: malformed (expected 'Bearer <token>')", "token")
    return token.strip(), False


def _same_origin(scope: Scope) -> bool:
    """Whether the request's Origin names the host it was sent to (a browser's own page)."""
    origins = _header(scope, b"origin")
    hosts = _header(scope, b"host")
    if len(origins) != 1 or len(hosts) != 1:
        return False
    _, sep, rest = origins[0].decode("latin-1").partition("://")
    return bool(sep) and rest.lower() == hosts[0].decode("latin-1").strip().lower()


Headers = list[tuple[bytes, bytes]]


def _refusal(exc: Exception, needed: Requirement) -> tuple[int, dict[str, Any], Headers]:
    """(status, body, extra headers) of a refusal, in the daemon's error shape."""
    if isinstance(exc, StoreUnreadable):
        message = f"access: the token store cannot be read ({exc}); retry later"
        return 503, {"detail": message, "message": message, "seq": None}, [(b"retry-after", b"1")]
    assert isinstance(exc, AccessError)
    message = str(exc)
    detail: dict[str, Any] = {"missing": exc.what, "message": message}
    if needed.log is not None:
        detail["log"], detail["scope"] = needed.log, needed.scope
    body = {"detail": detail, "message": message, "seq": None}
    if isinstance(exc, TokenRefused):
        challenge = 'Bearer realm="memstream"'
        if exc.what == "token" and "missing" not in message:
            challenge += ', error="invalid_token"'
        return 401, body, [(b"www-authenticate", challenge.encode())]
    challenge = f'Bearer realm="memstream", error="insufficient_scope", scope="{needed.scope}"'
    return 403, body, [(b"www-authenticate", challenge.encode())]


class AccessControl:
    """The ASGI guard that checks each request's token against its path's `requirement`,
    and leaves the grant in the request's scope (`GRANT_KEY`) for the routes."""

    def __init__(
        self,
        app: ASGIApp,
        verifier: TokenVerifier,
        page_refusal: Callable[[int, str, str], ASGIApp] | None = None,
    ) -> None:
        """`page_refusal(status, message, path)`: the web view's own answer to a refused
        page under /ui/ (HTML: a sign-in form for a 401); JSON everywhere else."""
        self.app = app
        self.verifier = verifier
        self.page_refusal = page_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = str(scope.get("method", "GET")), str(scope.get("path", ""))
        needed = requirement(method, path)
        if needed.open:
            await self.app(scope, receive, send)
            return
        try:
            presented, by_cookie = _bearer(scope)
            grant = self.verifier.check(presented)
            if by_cookie and method not in _SAFE and not _same_origin(scope):
                raise ScopeRefused(
                    "header.Origin: a request signed in by the web view's cookie must come "
                    "from this daemon's own pages (send the token in Authorization instead)",
                    "origin",
                )
            if needed.log is not None:
                authorize(grant, needed.log, needed.scope)
        except (AccessError, StoreUnreadable) as exc:
            status, body, headers = _refusal(exc, needed)
            if self.page_refusal is not None and path.startswith("/ui/"):
                await self.page_refusal(status, str(body["message"]), path)(scope, receive, send)
                return
            data = json.dumps(body).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(data)).encode()),
                        *headers,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": data})
            return
        scope[GRANT_KEY] = grant
        await self.app(scope, receive, send)


def granted_log(scope: Scope) -> str | None:
    """The one log a request's token grants; None when access control is off (all)."""
    grant: Grant | None = scope.get(GRANT_KEY)
    return None if grant is None else grant.log


def acting_agent(scope: Scope, actor: str | None, log_name: str) -> str | None:
    """The actor of a Recall made by this request: the token's agent when access control
    is on (an `actor` naming anyone else is a `ScopeRefused`), else `actor` as given."""
    grant: Grant | None = scope.get(GRANT_KEY)
    if grant is None:
        return actor
    authorize(grant, log_name, "recall")  # the guard checked it already; the route too
    if actor is not None and actor != grant.agent:
        raise ScopeRefused(
            f"actor: token {grant.token_id} acts as agent {grant.agent!r}, not {actor[:200]!r}; "
            "leave actor out (a Recall over HTTP is recorded as the token's agent)",
            "actor",
        )
    return grant.agent
