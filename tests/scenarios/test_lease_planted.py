"""What another party may leave in a shared cache's lease folders (anyone who can write to the cache can):

- a failure record whose exit code or stage no build step has (exit 0, 75, 1, 130 or 9; "lease" with 7;
  "build" with 4's code) is the lease of an unknown holder, taken over after a TTL: its code is never the
  run's (0 with no env file, 75 that sends a README-following agent back to `wait` for ever);
- the longest FLYDSL_HOST_ID the settings take is one a lease record carries.

Each planted record starts from a real one: host "a" fails its LLVM build once, which leaves generation 1 of
the real MLIR key; the test rewrites it."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Dict, List, Tuple

import pytest

from ensure_flydsl.binary_cache.lease import generation_path
from tests.helpers.fleet import SharedCache, fleet_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import Barrier
from tests.helpers.workspace import Workspace

TAKE_OVER = "taking it over"


def first_record(tmp: str, repo: FixtureRepo, shared: SharedCache) -> Dict[str, object]:
    """Generation 1 of the real MLIR key, as host "a" leaves it when its LLVM build fails."""
    a = fleet_host(tmp, repo, "a", shared)
    out = a.run(FIXTURE_LLVM_HOOK="exit 1")
    assert out.returncode == 4, out.stderr
    (record,) = shared.leases("mlir")
    assert record["generation"] == 1 and record["state"] == "failed"
    return record


def generation(record: Dict[str, object], n: int) -> str:
    return generation_path("mlir", str(record["key"]), n)


def bounded_run(ws: Workspace, limit_s: float = 120.0, **env: str) -> Tuple[int, str]:
    """Run ``ensure`` on ``ws``; fail at once (killing it) when its log says "taking it over" more than 3
    times (a run that takes a generation over and over) or it is still running after ``limit_s``."""
    proc = ws.popen(**env)
    out: List[str] = []
    readers = [threading.Thread(target=lambda s=stream: out.append(s.read())) for stream in (proc.stdout, proc.stderr)]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + limit_s
    try:
        while proc.poll() is None:
            logged = open(ws.log).read() if os.path.exists(ws.log) else ""
            assert logged.count(TAKE_OVER) <= 3, f"the run takes the lease over and over:\n{logged[-3000:]}"
            assert time.monotonic() < deadline, f"still running after {limit_s} s:\n{logged[-3000:]}"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for reader in readers:
            reader.join(30)
    return proc.returncode, "".join(out)


# -- a failure record's exit code -------------------------------------------------------------------------------
@pytest.mark.parametrize("stage,code,expect", [
    ("llvm", 0, None), ("llvm", 75, None), ("llvm", 1, None), ("llvm", 130, None), ("llvm", 9, None),
    ("lease", 7, None), ("build", 4, None), ("llvm", 4, 4),
])
def test_a_failure_record_is_believed_only_as_a_build_steps_failure(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, stage: str, code: int, expect: object) -> None:
    """The record says the key failed twice (failures_before 1, ended now): a build step's failure ends the
    waiter with that step's exit code; anything else is an unknown holder's lease, built over after a TTL."""
    shared = SharedCache("folder", str(tmp_path))
    record = first_record(str(tmp_path), fixture_repo, shared)
    planted = dict(record, state="failed", ended=time.time(), failures_before=1,
                   failure={"stage": stage, "exit_code": code, "reason": "boom"})
    shared.put(generation(record, 1), json.dumps(planted).encode())
    # A believed failure is news to a newcomer for its TTL after the record's date: the default's 120 s, so a
    # slow start cannot make it history; an unknown holder's lease is waited out for the reader's TTL: 2 s.
    b = fleet_host(str(tmp_path), fixture_repo, "b", shared, **({} if expect else {"FLYDSL_LEASE_TTL": "2"}))
    got, said = bounded_run(b)
    if expect is not None:
        assert got == expect, said
        assert "failed twice in the fleet, last on a (run " in said and f"stage {stage}, exit {code}: boom" in said
        assert b.marker()["exit_code"] == expect and b.marker()["stage"] == stage
        return
    assert got == 0 and os.path.isfile(b.env_file), said
    assert b.env_twin()["how"] == "built"
    assert f"{generation(record, 1)} in {shared.url} is not one this tool writes (" in said
    assert "failed twice" not in said and said.count(TAKE_OVER) == 1
    assert "took the build lease on MLIR for LLVM " in said and "(generation 2)" in said


# -- FLYDSL_HOST_ID ----------------------------------------------------------------------------------------------
def test_a_host_id_of_200_characters_is_read_back_as_that_host(tmp_path: "os.PathLike[str]",
                                                                fixture_repo: FixtureRepo) -> None:
    """The longest FLYDSL_HOST_ID the settings take is one a lease record carries: another host names it
    (one character more is bad input: tests/scenarios/test_bad_input.py)."""
    tmp = str(tmp_path)
    shared = SharedCache("folder", tmp)
    name = "h" * 200
    held = Barrier(tmp, "a-llvm")
    a = fleet_host(tmp, fixture_repo, "a", shared, FLYDSL_HOST_ID=name)
    proc = a.popen(FIXTURE_LLVM_HOOK=held.hook)
    try:
        shared.wait_lease("mlir", host=name)
        b = fleet_host(tmp, fixture_repo, "b", shared, FLYDSL_LOCK_TIMEOUT="1")
        got, said = bounded_run(b)
        assert got == 7 and f"waiting for {name} (run " in said, said
        assert "not one this tool writes" not in said and "unknown host" not in said
    finally:
        held.release()
    proc.communicate(timeout=120)
    assert proc.returncode == 0
