"""In CI (CI=true) a skipped test fails the run; elsewhere a skip stays a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

SUITE = """
import pytest

def test_skipped():
    pytest.skip("no server")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

def test_ok():
    pass
"""


def _run(
    pytester: pytest.Pytester, ci: str | None, monkeypatch: pytest.MonkeyPatch
) -> pytest.RunResult:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_suite=SUITE)
    return pytester.runpytest("-p", "no:cacheprovider")


def test_skip_fails_in_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _run(pytester, "true", monkeypatch)
    result.assert_outcomes(passed=1, failed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*skipped in CI*no server*"])


def test_skip_is_a_skip_outside_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(pytester, None, monkeypatch)
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)


def test_module_skip_fails_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(
        test_mod='import pytest\npytest.skip("no module", allow_module_level=True)\n'
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
