"""The reporter's memory of a run (support/report.py): the build's output tail a failure message shows (the last
lines, at most TAIL_LINES of them), and the log, which gets every line whatever the stream shows."""

from __future__ import annotations

import io
import pathlib
import time

from ensure_flydsl.runs.progress import Pulse, heartbeat
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


def test_quiet_messages_reach_a_log_that_is_the_stream(tmp_path: "pathlib.Path") -> None:
    # -q shows failures only, the log gets every line: also when the stream is the log (`-q ... > the log`).
    log = str(tmp_path / "ensure_flydsl.log")
    with open(log, "a") as stream:
        reporter = Reporter(stream, verbosity=-1)
        reporter.open_log(log)
        reporter.say("a message")
        reporter.build_line("a build line")
        reporter.close()
    with open(log) as handle:
        lines = handle.read().splitlines()
    assert [line.split("] ", 1)[-1] for line in lines[1:]] == ["ensure-flydsl: a message", "a build line"]


def test_without_a_stream_the_heartbeat_writes_the_log_once_an_interval(tmp_path: "pathlib.Path") -> None:
    """A reporter with nowhere to show lines (the API's default, a reader gone) is quiet by design: its heartbeat
    says a pulse to the log once an interval, not every 10 ms for the whole run."""
    log = str(tmp_path / "ensure_flydsl.log")
    reporter = Reporter(None)
    reporter.open_log(log)
    pulse = Pulse(step=None, percent=None, elapsed_s=1.0, eta_s=None, run_id="run", pid=None)
    with heartbeat(reporter, lambda: pulse, 0.25):
        time.sleep(1.0)
    reporter.close()
    with open(log) as handle:
        assert len(handle.read().splitlines()) <= 6  # the run's first line and four pulses, one of them late
