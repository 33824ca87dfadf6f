"""Differential property tests: random graph scripts through memex-python 0.14.0 and
memstream's public APIs must give the same outcomes (results, events, errors), the same
states after every step, and the same ``stringify``.

``MEMSTREAM_COMPAT_EXAMPLES`` raises the number of scripts (a long local hunt); CI runs the
derandomized default, so a run is reproducible.
"""

from __future__ import annotations

import os
from typing import Any

import memex
import time_machine
from hypothesis import HealthCheck, given, settings

import memstream
from tests.compat.graph_scripts import NOW_MS, compare, scripts

EXAMPLES = int(os.environ.get("MEMSTREAM_COMPAT_EXAMPLES", "1200"))


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 1200,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(script=scripts)
def test_random_graph_scripts_behave_as_memex(script: list[Any]) -> None:
    with time_machine.travel(NOW_MS / 1000, tick=False):
        compare(script, memex, memstream)
