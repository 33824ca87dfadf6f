"""The `memstream` command line: one entry point, verbs grouped by component."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Each component module exposes `register(subparsers)`, adding its verbs; the parser's
# `func` default is what runs. Listing them here keeps the command line in one place.
_COMPONENTS = (
    "memstream.demo",
    "memstream.stack.cli",
    "memstream.bench.cli",
    "memstream.projector_cli",
    "memstream.queryd_cli",
    "memstream.import_cli",
    "memstream.evidence_cli",
    "memstream.agents_cli",
    "memstream.erasure_cli",
    "memstream.tokens_cli",
    "memstream.acl_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memstream",
        description="Audit-ready, event-sourced memory for AI agents.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    parser.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default=None,
        help="log at this level (default WARNING; -v: DEBUG)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMPONENTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a component not built yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level or (logging.DEBUG if args.verbose else logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return int(func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
