"""The daemon's errors as answers: every answer other than 200 is one JSON shape.

The body is ``{"detail", "message", "seq"}``: `message` one line naming the field, id or
seq at fault, `detail` the validation errors for a 422 (else the message again), `seq`
the position reached when it is known (also in the ``X-Memstream-Seq`` header). A 503
carries ``Retry-After: 1``. `install_error_handlers` maps onto it what the routes raise
(`ApiError`), what FastAPI and Starlette raise (validation, unknown endpoint, method),
what the log handles raise (not ready, unavailable), and anything unexpected (a 500 that
names only the exception's type; the traceback goes to the log).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from queryd.daemon.handles import NotReady, Unavailable
from queryd.daemon.jsonlog import printable
from queryd.daemon.models import ErrorBody
from queryd.daemon.seq import SEQ_HEADER, seq_text

__all__ = ["ERROR_RESPONSES", "ApiError", "error_response", "install_error_handlers"]

log = logging.getLogger("memstream.queryd")

# The error answers any route may give, as the OpenAPI document lists them (every router).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "unknown log, id or endpoint"},
    422: {"model": ErrorBody, "description": "a malformed parameter or body"},
    503: {
        "model": ErrorBody,
        "description": "the log is hydrating, does not exist, or is unavailable",
    },
}


class ApiError(Exception):
    """An answer other than 200: status and a message naming what is at fault."""

    def __init__(
        self, status: int, message: str, seq: int | None = None, detail: Any = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.seq, self.detail = status, message, seq, detail


def error_response(
    status: int, message: str, detail: Any = None, seq: int | None = None
) -> JSONResponse:
    body = {"detail": message if detail is None else detail, "message": message, "seq": seq}
    headers = {SEQ_HEADER: seq_text(seq)} if seq is not None else {}
    if status == 503:
        headers["Retry-After"] = "1"
    return JSONResponse(body, status_code=status, headers=headers or None)


def _dotted(location: Iterable[Any]) -> str:
    """A validation error's location (``query``, ``limit``) as ``query.limit``."""
    return ".".join(str(part) for part in location)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        message = "; ".join(f"{_dotted(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
        return error_response(422, message, errors)

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.detail, exc.seq)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        path = printable(request.url.path, 200)
        method = printable(request.method, 20)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {method} {path}"
        elif exc.status_code == 405:
            message = f"method {method} is not allowed on {path}"
        return error_response(exc.status_code, message)

    @app.exception_handler(NotReady)
    async def _not_ready(request: Request, exc: NotReady) -> JSONResponse:
        return error_response(503, str(exc))

    @app.exception_handler(Unavailable)
    async def _unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        return error_response(503, str(exc), seq=exc.reached)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "%s %s failed", printable(request.method, 20), printable(request.url.path), exc_info=exc
        )
        return error_response(500, f"internal error: {type(exc).__name__}")
