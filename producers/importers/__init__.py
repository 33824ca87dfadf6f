"""Importers: history from the seed systems appended to a memstream log, and the graph
exported back in the TypeScript library's shape.

- `import_audit_ready_memory(path, location)`: an audit-ready-memory database (ArcadeDB,
  through the optional extra ``memstream[import]``).
- `import_memex(file, location)`: a memex snapshot (``MemexStore.dumps`` / ``stringify``)
  or a file of memex envelopes (JSON lines).
- `export_memex(location, file)`: the log's memory graph as a snapshot.

Each import reads and checks the whole source before it appends, appends in batches,
resumes an interrupted run without duplicating anything, and verifies the log against the
source afterwards (see the modules for how).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from producers.importers.audit import import_audit_ready_memory
    from producers.importers.errors import (
        CorruptSourceError,
        ImportConflictError,
        ImportInterruptedError,
        ImportSourceError,
        LogNotEmptyError,
        MissingExtraError,
        ReaderFailedError,
        SignedLogError,
        SourceNotFoundError,
        UnsupportedSourceError,
        VerificationError,
    )
    from producers.importers.memex import export_memex, import_memex
    from producers.importers.report import ImportReport, Skip

__all__ = [
    "import_audit_ready_memory",
    "import_memex",
    "export_memex",
    "ImportReport",
    "Skip",
    "ImportSourceError",
    "SourceNotFoundError",
    "CorruptSourceError",
    "UnsupportedSourceError",
    "LogNotEmptyError",
    "ReaderFailedError",
    "ImportConflictError",
    "ImportInterruptedError",
    "VerificationError",
    "SignedLogError",
    "MissingExtraError",
]

# The modules that hold those names, lightest first. A name is loaded when first asked
# for (PEP 562), not with the package: the reader process runs a module of this package
# (`arcadedb_source`), and importing every importer (the log, the fold, the graph) first
# cost it a quarter of a second of start-up, which the whole import waits for.
_MODULES = ("errors", "report", "audit", "memex")


def __getattr__(name: str) -> Any:
    if name in __all__:
        for module in _MODULES:
            value = getattr(importlib.import_module(f"{__name__}.{module}"), name, None)
            if value is not None:
                globals()[name] = value
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
