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
