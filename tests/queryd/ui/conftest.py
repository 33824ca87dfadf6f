"""Fixtures of the web view's tests: the daemon tests' helpers (seeding, serving)."""

from __future__ import annotations

import sys
from pathlib import Path

# daemon_support (seed, serve, projector_for) lives beside the daemon's tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "daemon"))
