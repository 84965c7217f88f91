"""What another party may leave in a shared cache's lease folders, and what a host writes there for the others:

- the longest FLYDSL_HOST_ID the settings take is one a lease record carries."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import List, Tuple

from tests.helpers.fleet import SharedCache, fleet_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import Barrier
from tests.helpers.workspace import Workspace

TAKE_OVER = "taking it over"


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
