"""`memstream projector run` refuses a bad interval or count before it touches anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Port 1: nothing listens there, so a run that got past its arguments would fail otherwise.
LOG = "kafka://127.0.0.1:1/x?redis=redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--snapshot-ms", "0", "--snapshot-ms: 0 is less than 1"),
        ("--snapshot-ms", "-5", "--snapshot-ms: -5 is less than 1"),
        ("--snapshot-ms", "1e3", "--snapshot-ms: '1e3' is not a whole number"),
        ("--snapshot-records", "0", "--snapshot-records: 0 is less than 1"),
        ("--commit-linger-ms", "-1", "--commit-linger-ms: -1 is less than 0"),
        ("--group-session-ms", "999", "--group-session-ms: 999 is less than 1000"),
        ("--group-protocol", "eager", "--group-protocol: invalid choice: 'eager'"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option(flag: str, value: str, says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memstream", "projector", "run", "--log", LOG, flag, value],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "metadata" not in done.stderr  # refused before any broker was asked


def test_the_command_lines_session_is_the_groups_default() -> None:
    """The CLI keeps its default apart (it does not import the group, a heavy import for
    every command); the two must agree."""
    import inspect

    from memstream.projector_cli import SESSION_MS
    from projector.group import ProjectorGroup

    default = inspect.signature(ProjectorGroup).parameters["session_timeout_ms"].default
    assert default == SESSION_MS


def test_the_command_lines_budget_of_transactions_is_the_groups_default() -> None:
    import inspect

    from memstream.projector_cli import COMMITS_PER_S
    from projector.group import DEFAULT_COMMITS_PER_S, ProjectorGroup

    default = inspect.signature(ProjectorGroup).parameters["commits_per_s"].default
    assert default == DEFAULT_COMMITS_PER_S == COMMITS_PER_S
