"""The daemon's log output: JSON lines or text lines that cannot be forged, rate-limited.

- JSON: one object a line (time, level, logger, message, extra fields); `json.dumps`
  escapes whatever a client put in a path or header.
- Text: control characters in a message (a ``%0A`` decoded from a path, say) are written
  escaped (``\\n``, ``\\x1b``), and each line of a traceback is prefixed with ``  | ``, so
  a client cannot make a line that looks like one of the daemon's own.
- Warnings and errors that repeat (an accept loop out of file descriptors, a flood of
  malformed requests, a log that keeps failing) are let through a few times a period per
  message, then counted and summarised: a fault cannot fill the disk with its log.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "JsonFormatter",
    "TextFormatter",
    "RateLimitFilter",
    "Throttle",
    "configure_logging",
    "printable",
]

# Attributes every LogRecord has; anything else was passed as `extra=`.
# (uvicorn adds `color_message`, an ANSI-coloured copy of the message: left out.)
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "color_message",
}

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def printable(text: str, limit: int = 2000) -> str:
    """`text` on one line: control characters escaped, at most `limit` characters kept."""
    if len(text) > limit:
        text = text[:limit] + "..."
    return _CONTROL.sub(_escape_char, text)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: message``, the message escaped to one line; a traceback after
    it with every line prefixed, so that no line of it can pass for a record."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = printable(record.message, limit=10_000)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:  # noqa: N802 (logging's name)
        text = super().formatException(ei)
        return "\n".join("  | " + printable(line, limit=10_000) for line in text.splitlines())

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 (logging's name)
        return "\n".join("  | " + printable(line) for line in stack_info.splitlines())


class RateLimitFilter(logging.Filter):
    """At most `burst` records a `period` per (logger, level, message template), for
    records at `level` or above; the rest are dropped and counted, and the next record let
    through says how many were."""

    def __init__(self, burst: int = 5, period: float = 10.0, level: int = logging.WARNING) -> None:
        super().__init__()
        self.burst, self.period, self.level = burst, period, level
        self._seen: dict[tuple[str, int, str], list[float]] = {}  # key -> [start, n, dropped]
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        key = (record.name, record.levelno, str(record.msg)[:200])
        now = time.monotonic()
        with self._lock:
            entry = self._seen.get(key)
            if entry is None or now - entry[0] >= self.period:
                dropped = 0 if entry is None else int(entry[2])
                self._seen[key] = [now, 1, 0]
                if len(self._seen) > 10_000:  # many distinct messages: forget old windows
                    self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self.period}
            elif entry[1] < self.burst:
                entry[1] += 1
                dropped = 0
            else:
                entry[2] += 1
                return False
        if dropped:
            record.msg = f"{record.msg} [{dropped} similar records dropped in the last period]"
        return True


class Throttle:
    """A warning a caller may repeat in a loop, logged at most once a `period` per key."""

    def __init__(self, logger: logging.Logger, period: float = 60.0) -> None:
        self.logger, self.period = logger, period
        self._last: dict[str, float] = {}

    def warning(self, key: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is None or now - last >= self.period:
            self._last[key] = now
            self.logger.warning(msg, *args)
        else:
            self.logger.debug(msg, *args)


def configure_logging(fmt: str = "text", level: int = logging.INFO) -> None:
    """Root logging for the daemon: escaped text lines, or JSON lines with `fmt="json"`;
    repeated warnings and errors rate-limited."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RateLimitFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
