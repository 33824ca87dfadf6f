"""`memstream bench SUITE`: each suite prints its figures beside the seed system's."""

from __future__ import annotations

import argparse
import importlib

# suite name -> module with run(args) and, optionally, add_arguments(parser)
SUITES = {
    "audit": "memstream.bench.audit",
    "graph": "memstream.bench.graph",
    "import": "memstream.bench.importer",
    "kafka": "memstream.bench.kafka",
    "queryd": "memstream.bench.queryd",
    "snapshot": "memstream.bench.snapshot",
    "evidence": "memstream.bench.evidence",
    "cluster": "memstream.bench.cluster",
    "signing": "memstream.bench.signing",
}


def _run(args: argparse.Namespace) -> int:
    names = list(SUITES) if args.suite == "all" else [args.suite]
    status = 0
    for name in names:
        try:
            module = importlib.import_module(SUITES[name])
        except ModuleNotFoundError as exc:
            if exc.name != SUITES[name]:
                raise
            print(f"bench {name}: not built yet")
            continue
        status |= int(module.run(args) or 0)
    return status


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "bench", help="measure memstream beside the seed systems and print a table"
    )
    parser.add_argument("suite", choices=[*SUITES, "all"], help="what to measure")
    for module_name in SUITES.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        add = getattr(module, "add_arguments", None)
        if add is not None:
            add(parser)
    parser.set_defaults(func=_run)
