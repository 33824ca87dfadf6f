"""ASGI guards in front of the routes: the Host allow-list, and the request body limit.

A page on another site can make a browser send requests to a daemon on localhost through
a name it controls (DNS rebinding); the browser then sends that name in ``Host``. Only the
names the daemon is served under are accepted: by default the localhost names and the
address it listens on (`default_allowed_hosts`), more with ``--allowed-host`` or
``MEMSTREAM_QUERYD_ALLOWED_HOSTS``; ``*`` accepts any. Anything else is a 400 in JSON.
``/healthz`` is exempt: it says nothing but "alive", and orchestrators probe it by IP
address.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queryd.daemon.jsonlog import printable

__all__ = [
    "BodyLimit",
    "BodyTooLarge",
    "HostAllowList",
    "LOCAL_HOSTS",
    "default_allowed_hosts",
    "parse_host",
]

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = {"", "0.0.0.0", "::", "[::]"}
_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS"})


def default_allowed_hosts(bind: str | None = None) -> tuple[str, ...]:
    """The localhost names, and `bind` when it names one address (not 0.0.0.0 or ::)."""
    names = list(LOCAL_HOSTS)
    if bind is not None:
        host = bind.strip().strip("[]").lower()
        if host and bind.strip() not in _WILDCARD_BINDS and host not in names:
            names.append(host)
    return tuple(names)


def parse_host(value: str) -> str | None:
    """The host name of a Host header value (port and IPv6 brackets removed, lower case,
    no trailing dot); None when it is not a host at all."""
    value = value.strip()
    if not value:
        return None
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[1:end], value[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        return host.lower()
    host, sep, port = value.rpartition(":")
    if sep and port.isdigit() and ":" not in host:
        value = host
    elif ":" in value and value.count(":") > 1:
        return value.lower()  # a bare IPv6 address
    elif sep:
        return None
    return value.lower().rstrip(".") or None


def _error(status: int, message: str) -> tuple[Message, Message]:
    body = json.dumps({"detail": message, "message": message, "seq": None}).encode()
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


class HostAllowList:
    """A 400 in JSON for a request whose Host header names no allowed host."""

    def __init__(
        self, app: ASGIApp, allowed: Iterable[str] | None, exempt: Iterable[str] = ("/healthz",)
    ) -> None:
        self.app = app
        names = None if allowed is None else [a.strip().lower().rstrip(".") for a in allowed]
        names = None if names is None or "*" in names else [n.strip("[]") for n in names if n]
        self.any = names is None
        self.exact = frozenset(n for n in (names or ()) if not n.startswith("*."))
        self.suffixes = tuple(n[1:] for n in (names or ()) if n.startswith("*."))
        self.exempt = frozenset(exempt)
        self.shown = ", ".join(names or ["*"])

    def allows(self, host: str | None) -> bool:
        if self.any:
            return True
        if host is None:
            return False
        return host in self.exact or any(host.endswith(s) for s in self.suffixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.any or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = next((v for k, v in scope.get("headers", ()) if k == b"host"), None)
        text = None if raw is None else raw.decode("latin-1")
        if self.allows(None if text is None else parse_host(text)) or (
            scope.get("path") in self.exempt
        ):
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = "no Host header" if text is None else f"Host {printable(text, 100)!r}"
        message = (
            f"header.Host: {shown} is not a name this daemon is served under (allowed: "
            f"{self.shown}; add one with --allowed-host or MEMSTREAM_QUERYD_ALLOWED_HOSTS)"
        )
        for event in _error(400, message):
            await send(event)


class BodyTooLarge(HTTPException):
    """A request body over the daemon's limit, found as it streamed in (a 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body: larger than {limit} bytes (the daemon's --max-body-bytes)")


class BodyLimit:
    """A 413 in JSON for a request body over `max_body` bytes: at once when its
    Content-Length says so, else as soon as that many bytes have streamed in (raised from
    `receive` as an HTTPException, which FastAPI hands to the daemon's JSON handler)."""

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body
        length = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), b"")
        if length and (not length.strip().isdigit() or int(length) > limit):
            for event in _error(413, str(BodyTooLarge(limit).detail)):
                await send(event)
            return
        if scope.get("method") in _NO_BODY:  # no route reads their body: nothing to count
            await self.app(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, counted, send)
