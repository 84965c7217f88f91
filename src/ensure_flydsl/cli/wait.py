"""``ensure-flydsl wait``: follow the root's run until it ends: 0, its failure's code, or 75 at ``--timeout``.

Heartbeat lines keep an agent's silence detector off; a dead run is noticed through its alive lock (exit 9)."""

from __future__ import annotations

import json
import time
from typing import Optional, Tuple

from ensure_flydsl.cli.status import ABSENT_EXIT, answer_object
from ensure_flydsl.errors import ExitCode
from ensure_flydsl.runs.answer import Answer, answer
from ensure_flydsl.runs.markers import installed_line, read_failure_marker, tail_of
from ensure_flydsl.runs.progress import Pulse, say_pulse
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter, fmt_seconds, known

POLL_S = 0.05


def wait(settings: Settings, reporter: Reporter, *, timeout: Optional[float], heartbeat: float,
         as_json: bool = False) -> int:
    """Poll while a run for the request lives; a run found dead is recorded here, should its watchdog be gone."""
    code, found = _wait(settings, reporter, timeout=timeout, heartbeat=heartbeat)
    if as_json:
        print(json.dumps(answer_object(settings, found), sort_keys=True))
    return code


def _wait(settings: Settings, reporter: Reporter, *, timeout: Optional[float],
          heartbeat: float) -> Tuple[int, Answer]:
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    next_beat = started
    while True:
        found = answer(settings, record_deaths=True)
        if found.state != RUNNING or found.record is None:
            return _finished(settings, found, reporter), found
        now = time.monotonic()
        if now >= next_beat:
            say_pulse(reporter, Pulse.of_record(found.record))  # the line a run's own heartbeat says
            next_beat = now + heartbeat
        if deadline is not None and now >= deadline:
            reporter.say(f"still running after {fmt_seconds(timeout)}; run `ensure-flydsl wait --timeout 540` "
                         "again (exit 75)")
            return int(ExitCode.STILL_RUNNING), found
        time.sleep(POLL_S)


def _finished(settings: Settings, found: Answer, reporter: Reporter) -> int:
    if found.state == SUCCEEDED:
        twin = found.twin
        what = (f"flydsl {known(twin.version)} ({known(twin.how)}) for {known(twin.python)}" if twin is not None
                else "the env file")
        reporter.say(f"succeeded: {what}; source {settings.env_file}")
        return 0
    there = found.installed
    if found.state == FAILED and found.failure is not None:
        failure = found.failure
        reporter.say(f"failed (exit {failure.exit_code}) in step {known(failure.stage)}: {known(failure.reason)}")
        marker = read_failure_marker(settings.fail_marker)
        log = found.record.log if found.record is not None else (marker.log if marker is not None else "")
        tail = list(marker.log_tail) if marker is not None and marker.run_id == found.run_id else None
        tail = tail or tail_of(log)
        if tail:
            reporter.say(f"last lines of the log ({log}):\n" + "\n".join("    " + str(t) for t in tail))
        if there is not None:
            reporter.say(installed_line(there))
        if found.hint:
            reporter.say(f"next: {found.hint}")
        return failure.exit_code
    reporter.say(f"nothing to wait for: {found.reason}; start a run with `ensure-flydsl start`")
    if there is not None:
        reporter.say(installed_line(there))
    return ABSENT_EXIT
