"""A run is never silent while it works: whatever the step, a heartbeat line (state, step, percent, elapsed,
ETA) comes at least every interval, with its output in a file, in a pipe, or as JSON events on stderr.

GEAK kills an agent silent for 180 s; a blocking run with its output in a file printed nothing for 200 s
while a build step printed nothing itself.  The interval is 30 s; ENSURE_FLYDSL_HEARTBEAT_S shortens it
here.  The gaps are asserted against the interval with a wide slack (a busy 2-core machine), and each
silent step lasts ten intervals, so a run without heartbeats fails by far.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from typing import List, Tuple

import filelock
import pytest

from tests.helpers.scenario import gaps, status, timed_lines, wait_until
from tests.helpers.workspace import Workspace

INTERVAL_S = 0.4
SILENT_S = 10 * INTERVAL_S  # how long the silent step lasts
SLACK_S = 5 * INTERVAL_S  # the longest gap allowed: well under the silent step, well over the interval
BEATING = {"ENSURE_FLYDSL_HEARTBEAT_S": str(INTERVAL_S)}


def beats(lines: List[Tuple[float, str]], step: str) -> List[str]:
    return [text for _, text in lines if f"running: step {step}" in text]


@pytest.mark.parametrize("into", ["file", "pipe"])
def test_a_silent_build_step_still_says_it_works(ws: Workspace, into: str) -> None:
    code, lines = timed_lines(ws, into=into, FIXTURE_BUILD_HOOK=f"sleep {SILENT_S}", **BEATING)
    assert code == 0, lines
    assert max(gaps(lines)) < SLACK_S, lines
    said = beats(lines, "build 100.0%")
    assert len(said) >= 3, lines
    assert "elapsed " in said[-1] and "ETA " in said[-1] and "pid " in said[-1], said[-1]


def test_a_step_past_its_usual_time_says_so_and_its_eta_never_reads_0(ws: Workspace) -> None:
    """This host has built the fixture in about a second; a build step that then stays silent for ten
    heartbeats is overdue: the heartbeat says by how much, and the ETA is rescaled (it read 0s for as long
    as the step outlasted its usual time, through LLVM's silent final link)."""
    assert ws.run().returncode == 0  # the host's history learns the fixture's few seconds
    assert ws.run("clean").returncode == 0
    code, lines = timed_lines(ws, FIXTURE_BUILD_HOOK=f"sleep {SILENT_S}", FLYDSL_STORE="off", **BEATING)  # built
    assert code == 0, lines
    said = beats(lines, "build 100.0%")
    assert said and not [text for text in said if "ETA 0s" in text], said
    assert re.search(r", ETA \d+s, overdue \d+s \(run ", said[-1]), said


def test_json_mode_sends_heartbeat_events_on_stderr(ws: Workspace) -> None:
    code, lines = timed_lines(ws, "--json", stream="stderr", FIXTURE_BUILD_HOOK=f"sleep {SILENT_S}", **BEATING)
    assert code == 0, lines
    assert max(gaps(lines)) < SLACK_S, lines
    events = [json.loads(text) for _, text in lines]
    pulses = [e for e in events if e["event"] == "heartbeat"]
    in_build = [e for e in pulses if e["step"] == "build"]
    assert len(in_build) >= 3, events
    last = in_build[-1]
    assert last["state"] == "running" and last["percent"] == 100.0 and isinstance(last["elapsed_s"], float)
    assert isinstance(last["eta_s"], float) and last["pid"] > 0 and last["run_id"]
    assert last["text"].startswith("running: step build 100.0%, elapsed ")


def test_a_wait_for_the_build_lock_says_it_works(ws: Workspace) -> None:
    """The lock wait says who holds the lock every 30 s; the heartbeat fills the time between."""
    holder = filelock.FileLock(ws.lock_file)
    holder.acquire()
    ran: List[Tuple[int, List[Tuple[float, str]]]] = []
    thread = threading.Thread(target=lambda: ran.append(timed_lines(ws, **BEATING)))
    thread.start()
    try:
        wait_until("the run waits for the lock", lambda: status(ws)["step"] == "lock", 60)
        time.sleep(SILENT_S)  # the holder's work, as long as a silent step (not a timing assertion)
    finally:
        holder.release()
    thread.join(timeout=120)
    code, lines = ran[0]
    assert code == 0, lines
    assert max(gaps(lines)) < SLACK_S, lines
    assert len(beats(lines, "lock")) >= 3, lines


def test_quiet_stays_quiet(ws: Workspace) -> None:
    """-q shows nothing but a failure (the README says so), heartbeats included."""
    code, lines = timed_lines(ws, "-q", FIXTURE_BUILD_HOOK=f"sleep {3 * INTERVAL_S}", **BEATING)
    assert code == 0 and lines == [], lines


def test_a_slow_first_probe_says_it_works(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """Before the run is tracked (the first probe), the heartbeat says the step and no ETA."""
    slow, once = os.path.join(str(tmp_path), "slow-python"), os.path.join(str(tmp_path), "slept")
    with open(slow, "w") as handle:  # slow the first time only: the probe; the build's own calls are not
        handle.write(f"#!/bin/sh\n[ -e {once} ] || {{ : > {once}; sleep {SILENT_S / 2}; }}\n"
                     f"exec {sys.executable} \"$@\"\n")
    os.chmod(slow, 0o755)
    code, lines = timed_lines(ws, FLYDSL_PYTHON=slow, **BEATING)
    assert code == 0, lines
    assert max(gaps(lines)) < SLACK_S, lines
    assert any(text.endswith(")") and "running: step probe, elapsed" in text and "ETA unknown" in text
               for _, text in lines), lines
