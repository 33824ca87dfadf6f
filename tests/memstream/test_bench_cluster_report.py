"""bench cluster counts what its projectors warned of, by kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstream.bench.cluster import _missing_report, _warnings


def test_warnings_are_counted_by_kind_across_logs_and_numbers(tmp_path: Path) -> None:
    one, two = tmp_path / "1.log", tmp_path / "2.log"
    one.write_text(
        "2026-12-05 03:57:02,781 WARNING memstream.projector: bench-cluster-b72fd471-067: "
        "lease not renewed in time; publishing paused\n"
        "2026-12-05 03:57:03,000 INFO memstream.projector: bench-cluster-b72fd471-067: "
        "resumed from the snapshot at seq 12\n"
        "2026-12-05 03:57:47,098 ERROR memstream.kafka.client: TXNERR 10 message(s) timed out\n"
    )
    two.write_text(
        "2026-12-05 03:58:02,781 WARNING memstream.projector: bench-cluster-0000aaaa-001: "
        "lease not renewed in time; publishing paused\n"
        "2026-12-05 03:58:47,098 ERROR memstream.kafka.client: TXNERR 3 message(s) timed out\n"
        "a line that is not a log record\n"
    )
    assert _warnings([one, two]) == [
        (2, "WARNING LOG: lease not renewed in time; publishing paused"),
        (2, "ERROR TXNERR N message(s) timed out"),
    ]
    empty = tmp_path / "empty.log"
    empty.touch()
    assert _warnings([empty]) == []


def test_the_missing_report_names_each_log_its_seqs_and_where_the_reader_stands() -> None:
    class _Reader:
        def where(self, topic: str) -> str:
            return f"<where {topic}>"

    report = _missing_report(
        _Reader(),  # type: ignore[arg-type]
        ["log-000", "log-001", "log-002"],
        {(1, 7), (1, 3), (2, 0)},
    )
    assert report.splitlines() == [
        "  without a lifecycle event, in 2 log(s):",
        "    log-001: 2 appends, seqs 3-7; lifecycle topic: <where log-001.lifecycle>",
        "    log-002: 1 appends, seqs 0-0; lifecycle topic: <where log-002.lifecycle>",
    ]


def test_the_log_level_is_chosen_on_the_command_line() -> None:
    from memstream.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["--log-level", "INFO"]).log_level == "INFO"
    assert parser.parse_args([]).log_level is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-level", "LOUD"])
