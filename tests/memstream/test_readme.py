"""The README's Python examples run as written, and its Quickstart has exactly two commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_quickstart_is_two_commands() -> None:
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\w*\n(.*?)```", quickstart, re.DOTALL)
    assert len(blocks) == 1
    assert [line for line in blocks[0].splitlines() if line.strip()] == ["make demo", "make test"]


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example{i}" for i in range(len(EXAMPLES))])
def test_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
