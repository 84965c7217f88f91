"""What the ETA tells a new user is true: it follows the route the run takes, it moves as the step's percent
moves, and every root of a host learns from the host's earlier runs (one history in the user's cache folder).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import List, Optional

import pytest

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import history_file
from ensure_flydsl.runs.timings import DEFAULT_SECONDS, HISTORY_VERSION, read_history
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.workspace import Workspace

_ETA = re.compile(r"ETA (unknown|(?:(\d+)h)?(?:(\d+)m)?(\d+)?s?)")


def seconds(shown: str) -> Optional[float]:
    """``fmt_seconds`` read back: ``16m31s`` -> 991.0, ``unknown`` -> None."""
    match = _ETA.fullmatch("ETA " + shown)
    assert match, shown
    if match.group(1) == "unknown":
        return None
    hours, minutes, secs = (int(g) if g else 0 for g in match.groups()[1:])
    return hours * 3600.0 + minutes * 60.0 + secs


def progress_etas(stdout: str, step: str) -> List[Optional[float]]:
    """The ETAs of a plain run's progress lines of ``step`` (``llvm 25% (ETA 16m31s)``), in order."""
    return [seconds(m.group(1)) for m in re.finditer(rf"\] ensure-flydsl: {step} \d+% \(ETA ([^)]+)\)", stdout)]


def test_the_eta_moves_as_the_percent_moves_within_a_step(ws: Workspace) -> None:
    out = ws.run(FIXTURE_LLVM_SLEEP="0.2")
    assert out.returncode == 0, out.stderr
    etas = progress_etas(out.stdout, "llvm")  # at 25, 50, 75 and 100 %
    assert len(etas) == 4 and None not in etas, out.stdout
    assert all(a > b for a, b in zip(etas, etas[1:])), etas  # type: ignore[operator]


def test_a_second_root_on_the_host_starts_with_the_first_roots_history(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    first = Workspace(os.path.join(str(tmp_path), "one", "base"), fixture_repo)
    assert first.run().returncode == 0
    assert not os.path.exists(os.path.join(first.base, ".ensure_flydsl", "history.json"))  # not the root's
    learnt = read_history(first.host_dir).expected(Plan.SOURCE)
    assert learnt[Stage.LLVM] < 60 and learnt[Stage.BUILD] < 60  # measured here, not the defaults
    assert learnt[Stage.LLVM] != DEFAULT_SECONDS[Plan.SOURCE][Stage.LLVM]
    second = Workspace(os.path.join(str(tmp_path), "two", "base"), fixture_repo)
    out = second.run()
    assert out.returncode == 0, out.stderr
    etas = progress_etas(out.stdout, "llvm")
    # The defaults would say 16m31s at 25 %: the first root's few seconds say seconds.
    assert etas and all(e is not None and e < 60 for e in etas), out.stdout
    history = read_history(second.host_dir)
    assert len(history.routes[Plan.SOURCE][Stage.BUILD]) == 2  # both roots' runs, in one history


def test_runs_that_end_together_keep_each_others_durations(tmp_path: "os.PathLike[str]") -> None:
    """Real processes adding to one history at the same moment (the flock, then read, merge, replace)."""
    host = os.path.join(str(tmp_path), "host")
    go = os.path.join(str(tmp_path), "go")
    script = (
        "import os, sys, time\n"
        "from ensure_flydsl.errors import Plan, Stage\n"
        "from ensure_flydsl.runs.timings import remember\n"
        "while not os.path.exists(sys.argv[2]): time.sleep(0.001)\n"
        "assert remember(sys.argv[1], Plan.SOURCE, {Stage.BUILD: float(sys.argv[3]), Stage.LLVM: 1.0})\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, host, go, str(10 + i)]) for i in range(6)]
    open(go, "w").close()
    assert [p.wait(timeout=60) for p in procs] == [0] * 6
    builds = read_history(host).routes[Plan.SOURCE][Stage.BUILD]
    assert sorted(builds) == [10.0 + i for i in range(6)]


@pytest.mark.index  # the real flydsl wheel (the release way)
def test_a_release_run_says_seconds_from_its_first_heartbeat(
        tmp_path: "os.PathLike[str]", release_repo: FixtureRepo, wheelhouse: str) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), release_repo)
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "auto",
               "FLYDSL_PIN": "v0.2.2"}
    started = ws.run("start", **offline)
    assert started.returncode == 0, started.stderr
    waited = ws.run("wait", "--json", "--heartbeat", "0.1", **offline)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["how"] == "released"
    pulses = [json.loads(line) for line in waited.stderr.splitlines()]
    pulses = [p for p in pulses if p["event"] == "heartbeat"]
    assert pulses, waited.stderr
    # From the run `start` announced (a pin that names a release: that route) to the end: seconds, never the
    # source build's 21m27s.
    # The first is "starting" when `wait` looks before the worker's first step, else the step the worker is in
    # by then (probe, lock, fetch: how far it got is the scheduler's): whichever, it has an ETA.
    assert pulses[0]["eta_s"] is not None, pulses[0]
    assert all(p["eta_s"] is not None and p["eta_s"] < 60 for p in pulses), [p["eta_s"] for p in pulses]
    assert not any(re.search(r"ETA \d+m", p["text"]) for p in pulses), [p["text"] for p in pulses]


def test_a_planted_history_gives_no_eta_beyond_a_day(ws: Workspace) -> None:
    """Issue 42, item 9: a history file whose every step took six days (each within what a step may record)
    made `start` announce 448 h; what is estimated is clamped to a day."""
    planted = {"version": HISTORY_VERSION, "routes": {plan.value: {str(stage): [6 * 86400.0] for stage in plan.stages}
                                                     for plan in Plan}}
    os.makedirs(ws.host_dir, exist_ok=True)
    with open(history_file(ws.host_dir), "w") as handle:
        json.dump(planted, handle)
    assert read_history(ws.host_dir).expected(Plan.SOURCE)[Stage.LLVM] == 6 * 86400.0  # read as it is
    started = ws.run("start", FIXTURE_BUILD_SLEEP="5")
    assert started.returncode == 0, started.stderr
    status = json.loads(ws.run("status", "--json").stdout)
    assert status["state"] == "running" and 0 < status["eta_s"] <= 86400.0, status
    assert ws.run("wait", "--timeout", "120").returncode == 0
