"""The build's output tail the failure message shows (support/report.py: Reporter.tail): the last lines, at most
TAIL_LINES of them, however long the build's output was."""

from __future__ import annotations

import io

from ensure_flydsl.support.report import TAIL_LINES, Reporter


def test_the_tail_is_the_last_lines_and_stays_bounded() -> None:
    reporter = Reporter(io.StringIO())
    assert reporter.tail(20) == []
    for n in range(3):
        reporter.build_line(f"line {n}")
    assert reporter.tail(20) == ["line 0", "line 1", "line 2"] and reporter.tail(2) == ["line 1", "line 2"]
    for n in range(3, 10_003):
        reporter.build_line(f"line {n}")
        assert len(reporter._tail) < 2 * TAIL_LINES
    assert reporter.tail(20) == [f"line {n}" for n in range(9_983, 10_003)]
    assert reporter.tail(10 * TAIL_LINES) == [f"line {n}" for n in range(10_003 - TAIL_LINES, 10_003)]
