"""The failure marker reads back at one place, field by field (``runs/markers.py: FailureMarker``): what
``write_failure_marker`` wrote comes back whole, and a field of the wrong type reads as not recorded."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from typing import Tuple

import pytest

from ensure_flydsl.errors import Stage
from ensure_flydsl.runs.answer import answer
from ensure_flydsl.runs.liveness import record_death, seen_dead
from ensure_flydsl.runs.markers import (
    Failure,
    read_failure_marker,
    withdraw_failure_marker,
    write_failure_marker,
)
from ensure_flydsl.runs.records import FAILED, RunStore, new_record
from ensure_flydsl.settings import Settings


def test_what_is_written_reads_back(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), ".flydsl_build.failed")
    request = Settings(root="/x/R").request()
    write_failure_marker(path, stage=Stage.BUILD, exit_code=5, reason="build.sh failed", hint="read the log",
                         log="/x/ensure_flydsl.log", log_tail=["a", "b"], run_id="r1", request=request)
    marker = read_failure_marker(path)
    assert marker is not None and marker.failure == Failure(Stage.BUILD, 5, "build.sh failed", "read the log")
    assert (marker.request, marker.run_id, marker.log, marker.log_tail) == (request, "r1", "/x/ensure_flydsl.log",
                                                                            ("a", "b"))
    assert marker.names("/x/R") and not marker.names("/x/other")
    assert not withdraw_failure_marker(path, "/x/other") and os.path.exists(path)  # a sibling's stays
    assert withdraw_failure_marker(path, "/x/R") and not os.path.exists(path)


def test_wrong_types_read_as_not_recorded(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "marker")
    with open(path, "w") as handle:
        json.dump({"exit_code": 0, "request": "R", "run_id": 7, "log": ["x"], "log_tail": "tail"}, handle)
    marker = read_failure_marker(path)
    assert marker is not None and marker.failure is None  # exit 0 is no failure a run records
    assert (marker.request, marker.run_id, marker.log, marker.log_tail) == (None, None, "", ())
    assert marker.names("/any/root")  # one that names no request cannot say it is another root's
    with open(path, "w") as handle:
        handle.write("[1, 2]")
    assert read_failure_marker(path) is None and read_failure_marker(path + ".absent") is None


def test_a_marker_whose_request_is_not_a_request_names_no_root(tmp_path: "os.PathLike[str]") -> None:
    """Bad input's marker records ``{}`` (its settings were never read): it names no root, as a garbled or
    planted request does (a value no run writes: a relative root, an unknown strategy, a key too many or
    too few); no run takes it away as its own, and it answers no request."""
    path = os.path.join(str(tmp_path), "marker")
    write_failure_marker(path, stage=Stage.SETTINGS, exit_code=64, reason="FLYDSL_JOBS='0'", hint="", log=None,
                         log_tail=[], run_id="", request=None)
    with open(path) as handle:
        assert json.load(handle)["request"] == {}  # as the tool wrote it before the request was a record
    good = Settings(root="/x/R").request().to_json()
    for request in ({}, {**good, "root": "x/R"}, {**good, "strategy": "fastest"}, {**good, "extra": 1},
                    {k: v for k, v in good.items() if k != "exact_pin"}, {**good, "require": []},
                    {**good, "vllm_moe": 1}, {**good, "pin": "-x"}, {**good, "min_version": "soon"}):
        if request:
            with open(path, "w") as handle:
                json.dump({"stage": "build", "exit_code": 5, "reason": "r", "request": request}, handle)
        marker = read_failure_marker(path)
        assert marker is not None and marker.request is None and not marker.unnamed, request
        assert not marker.names("/x/R") and not withdraw_failure_marker(path, "/x/R") and os.path.exists(path)


def _runs(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> Tuple[Settings, RunStore]:
    """A root's settings and its run records' folder, under ``tmp_path``."""
    base = os.path.join(str(tmp_path), "base")
    monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(str(tmp_path), "cache"))
    settings = Settings(root=os.path.join(base, "FlyDSL"), fail_marker=os.path.join(base, ".flydsl_build.failed"))
    store = RunStore(settings.root)
    store.ensure_folder()
    return settings, store


def test_a_run_that_recorded_its_own_failure_is_not_taken_for_dead(tmp_path: "os.PathLike[str]",
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`wait` read the run's record while it ran; the run then failed, recorded it and let its alive lock go.  The
    stale "running" record is no death: the run's own failure, marker and timing record stay as it wrote them
    (record_death rewrote the marker and put a dead run's timing record over the run's own)."""
    settings, store = _runs(tmp_path, monkeypatch)
    stale = new_record(store, "20261207-161500-abcdef", request=settings.request(), fail_marker=settings.fail_marker,
                       log=settings.log_file, kind="blocking", pid=os.getpid(), step=Stage.BUILD, path_env=None)
    failure = Failure(Stage.BUILD, 5, "build.sh failed", "read the log")
    store.write(replace(stale, state=FAILED, finished=time.time(), failure=failure))  # no alive lock: it ended
    found = record_death(store, stale)
    assert found.state == FAILED and found.failure == failure
    assert not os.path.exists(settings.fail_marker)  # the run left none (its env file answered, say): none now
    assert not os.path.exists(os.path.join(str(tmp_path), "cache", "ensure-flydsl", "runs"))


def test_a_dead_runs_interpreter_is_looked_up_on_its_own_path(tmp_path: "os.PathLike[str]",
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead run asked for ``python3`` on its own PATH (``ensure(environ=...)``'s); the root's env file is for the
    ``python3`` of the PATH of the process that finds the death.  It does not answer the run's request: the marker
    is written (it was not: the finder's PATH was asked)."""
    base = os.path.join(str(tmp_path), "base")
    monkeypatch.setenv("XDG_CACHE_HOME", os.path.join(str(tmp_path), "cache"))
    pythons = {}
    for name in ("runs", "finders"):
        folder = os.path.join(str(tmp_path), name)
        os.makedirs(folder)
        pythons[name] = os.path.join(folder, "python3")
        with open(pythons[name], "w") as handle:
            handle.write("#!/bin/sh\n")
        os.chmod(pythons[name], 0o755)
    monkeypatch.setenv("PATH", os.path.dirname(pythons["finders"]))
    settings = Settings(root=os.path.join(base, "FlyDSL"), fail_marker=os.path.join(base, ".flydsl_build.failed"),
                        python="python3")
    root, request = settings.root, settings.request()
    os.makedirs(root)
    files = {module: f"{root}/build-fly/python_packages/{module}.py" for module in request.require}
    with open(settings.env_json, "w") as handle:  # made for the finder's python3, by its path
        json.dump({"request": replace(request, python=pythons["finders"]).to_json(), "how": "built", "tree": root,
                   "version": "0.2.2", "python": pythons["finders"], "python_version": "3.11.7", "abi": "x",
                   "commit": "a" * 40, "files": files, "watch": [], "site_dirs": [], "fingerprint": {},
                   "FLYDSL_ROOT": root, "pythonpath_prepend": [root], "VLLM_USE_FLYDSL_MOE": "1"}, handle)
    with open(settings.env_file, "w") as handle:
        handle.write("export FLYDSL_ROOT=x\n")
    store = RunStore(root)
    store.ensure_folder()
    dead = new_record(store, "20261207-161500-abcdef", request=request, fail_marker=settings.fail_marker,
                      log=settings.log_file, kind="blocking", pid=os.getpid(), step=Stage.BUILD,
                      path_env=os.path.dirname(pythons["runs"]))
    store.write(dead)  # "running", and no alive lock: it died
    found = record_death(store, dead)
    assert found.state == FAILED and found.failure is not None and found.failure.exit_code == 9
    marker = read_failure_marker(settings.fail_marker)
    assert marker is not None and marker.failure is not None and marker.failure.exit_code == 9


def test_a_run_killed_between_its_failure_marker_and_its_record_keeps_its_own_failure(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    """A run failed (exit 5), wrote its failure marker and its timing record, and was killed before its FAILED
    record: its death is recorded with the failure it said, the marker and the timing record stay its own (the
    death's exit 9 was written over them, and `wait` exited 9 where the marker said 5)."""
    settings, store = _runs(tmp_path, monkeypatch)
    run = new_record(store, "20261207-161500-abcdef", request=settings.request(), fail_marker=settings.fail_marker,
                     log=settings.log_file, kind="detached", pid=os.getpid(), step=Stage.BUILD, path_env=None)
    store.write(run)  # "running", and no alive lock: it was killed
    failure = Failure(Stage.BUILD, 5, "build.sh failed", "read the log")
    write_failure_marker(settings.fail_marker, stage=failure.stage, exit_code=5, reason=failure.reason,
                         hint=failure.hint, log=None, log_tail=["its last line"], run_id=run.run_id,
                         request=settings.request())
    assert seen_dead(store, run)[0].failure == failure  # `status` says how it ended
    found = record_death(store, run)
    assert found.state == FAILED and found.failure == failure
    recorded = store.read(run.run_id)
    assert recorded is not None and recorded.state == FAILED and recorded.failure == failure
    marker = read_failure_marker(settings.fail_marker)
    assert marker is not None and marker.failure == failure and marker.log_tail == ("its last line",)
    assert not os.path.exists(os.path.join(str(tmp_path), "cache", "ensure-flydsl", "runs"))


def test_a_run_that_ended_while_the_clock_was_ahead_never_hides_a_later_one(
        tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A failed (exit 5) while the clock was an hour ahead; the clock was set right, and run B of the same request
    failed (exit 2).  `status` and `wait` answer B's failure (they took A's, the largest end time, for ever)."""
    settings, store = _runs(tmp_path, monkeypatch)
    now = time.time()
    for run_id, code, finished in (("20261207-171500-aaaaaa", 5, now + 3600), ("20261207-161600-bbbbbb", 2, now)):
        run = new_record(store, run_id, request=settings.request(), fail_marker=settings.fail_marker,
                         log=settings.log_file, kind="detached", pid=None, step=Stage.FETCH, path_env=None)
        store.write(replace(run, state=FAILED, finished=finished, failure=Failure(Stage.FETCH, code, "failed", "")))
    found = answer(settings)
    assert (found.run_id, found.exit_code) == ("20261207-161600-bbbbbb", 2)
