"""`memstream import audit-ready-memory|memex` and `memstream export memex`: bring history
in from the seed systems, and take the graph out in the TypeScript library's shape."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from producers.importers import (
    ImportInterruptedError,
    ImportReport,
    export_memex,
    import_audit_ready_memory,
    import_memex,
)
from producers.logs.location import redact
from schemas.errors import MemstreamError

__all__ = ["register"]

Progress = Callable[[int, int], None]


@contextmanager
def _progress(label: str) -> Iterator[Progress]:
    """A bar on a terminal; plain lines (every 10%) on stderr otherwise."""
    if sys.stderr.isatty():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
        ) as bar:
            task = bar.add_task(label, total=None)

            def update(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield update
        return
    step = {"next": 0}

    def plain(done: int, total: int) -> None:
        if total and (done >= step["next"] or done == total):
            print(f"{label}: {done:,}/{total:,} records appended", file=sys.stderr, flush=True)
            step["next"] = done + max(1, total // 10)

    yield plain


def _print_report(report: Any, seconds: float) -> None:
    for line in report.lines():
        print(line)
    if report.appended and seconds > 0:
        print(f"  took:             {seconds:.2f} s ({report.appended / seconds:,.0f} records/s)")


def _run_import(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    options = {
        "append": args.append,
        "skip_bad": args.skip_bad,
        "verify": not args.no_verify,
        "batch_size": args.batch_size,
    }
    try:
        with _progress(f"import {args.source_kind}") as progress:
            if args.source_kind == "audit-ready-memory":
                report: ImportReport = import_audit_ready_memory(
                    args.path, args.location, progress=progress, **options
                )
            else:
                report = import_memex(args.path, args.location, progress=progress, **options)
    except ImportInterruptedError as exc:
        if isinstance(exc.report, ImportReport):
            _print_report(exc.report, time.perf_counter() - start)
        print(f"memstream import: {exc}", file=sys.stderr)
        return 1
    except (MemstreamError, OSError, ValueError) as exc:
        print(f"memstream import: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "memstream import: interrupted; the batches appended stay in the log, and the "
            "same command resumes after them",
            file=sys.stderr,
        )
        return 130
    _print_report(report, time.perf_counter() - start)
    return 0


def _run_export(args: argparse.Namespace) -> int:
    try:
        items, edges = export_memex(
            args.location, args.file, pretty=args.pretty, overwrite=args.force
        )
    except (MemstreamError, OSError) as exc:
        print(f"memstream export: {exc}", file=sys.stderr)
        return 1
    print(
        f"exported {items:,} items and {edges:,} edges from {redact(args.location)} to {args.file}"
    )
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _import_options(parser: argparse.ArgumentParser, default_batch: int) -> None:
    parser.add_argument("location", help="the memstream log: a path or kafka://HOST:PORT/LOG...")
    parser.add_argument(
        "--append",
        action="store_true",
        help="import into a log that already holds other records (after them)",
    )
    parser.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave out bad source records (each reported) instead of refusing the source",
    )
    parser.add_argument(
        "--no-verify", action="store_true", help="do not compare the log with the source after"
    )
    parser.add_argument(
        "--batch-size",
        type=_positive,
        default=default_batch,
        help=f"records per append, each batch all or none (default {default_batch})",
    )
    parser.set_defaults(func=_run_import)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "import", help="append history from audit-ready-memory or memex to a memstream log"
    )
    kinds = parser.add_subparsers(dest="source_kind", metavar="SOURCE", required=True)
    audit = kinds.add_parser(
        "audit-ready-memory",
        help="an audit-ready-memory database (ArcadeDB directory; pip install 'memstream[import]')",
    )
    audit.add_argument("path", help="the audit-ready-memory database directory")
    _import_options(audit, 2000)
    memex = kinds.add_parser(
        "memex", help="a memex snapshot (MemexStore.dumps / stringify) or envelope JSON lines"
    )
    memex.add_argument("path", help="the snapshot or envelope file")
    _import_options(memex, 1000)

    export = sub.add_parser(
        "export", help="write a memstream log's graph in another library's shape"
    )
    targets = export.add_subparsers(dest="target_kind", metavar="TARGET", required=True)
    to_memex = targets.add_parser(
        "memex", help="the memory graph as a memex snapshot (the TypeScript on-disk shape)"
    )
    to_memex.add_argument("location", help="the memstream log (it must exist)")
    to_memex.add_argument("file", help="the snapshot file to write")
    to_memex.add_argument("--pretty", action="store_true", help="indent the JSON (2 spaces)")
    to_memex.add_argument("--force", action="store_true", help="replace FILE if it exists")
    to_memex.set_defaults(func=_run_export)
