"""kill -9 of the whole process group at every fault point of a run: a plain rerun always succeeds with a
finished build of the pin, and no success marker ever exists for an unfinished tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from ensure_flydsl.layout import host_cache_dir, timings_dir
from ensure_flydsl.support.faults import POINTS
from tests.helpers.scenario import assert_finished_build_of, assert_one_tree, killed_at, wait_for
from tests.helpers.workspace import Workspace

# The cache's points need FLYDSL_CACHE: tests/test_kill_stages.py kills at those.
SOURCE_POINTS = [p for p in POINTS if p != "release-installed" and not p.startswith("cache-")]


@pytest.mark.parametrize("point", SOURCE_POINTS)
def test_kill_9_at_each_point_then_a_plain_rerun_succeeds(ws: Workspace, point: str) -> None:
    out = killed_at(ws, point)
    assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
    if point == "published":
        assert os.path.exists(ws.env_file)  # killed after the success marker: the tree was finished
        assert_finished_build_of(ws, ws.repo.commits["dev"])
    else:
        assert not os.path.exists(ws.env_file), "a success marker for an unfinished tree"
    again = ws.run("--json")
    assert again.returncode == 0, again.stderr
    assert_finished_build_of(ws, ws.repo.commits["dev"])
    # Killed after a script succeeded but before its record, that script runs again; nothing else does.
    redone = {"llvm-built": (2, 1), "build-done": (1, 2)}.get(point, (1, 1))
    assert (ws.count("llvm"), ws.count("build")) == redone


# What a run for v0.2.3 killed at each point leaves of the old tree's markers and the new one's, and how many
# builds the two runs and the rerun make in all (the rerun redoes a build whose stamp was not yet written).
CHANGING_PINS = {"checkout-begun": (False, 2), "build-done": (False, 3), "verified": (False, 2),
                 "twin-written": (True, 2)}


@pytest.mark.parametrize("point", sorted(CHANGING_PINS))
def test_kill_9_while_changing_pins(ws: Workspace, point: str) -> None:
    """A tree built for one pin, a run for another killed half-way: the rerun finishes the new pin and
    the old env file never answered for it."""
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # v0.2.3's own tree: dev's 0.2.2 passes the version-only gate
    assert ws.run().returncode == 0
    new, (twin_left, builds) = ws.repo.commits["v0.2.3"], CHANGING_PINS[point]
    out = killed_at(ws, point, FLYDSL_PIN="v0.2.3")
    assert out.returncode == -signal.SIGKILL
    # The old env file went when the build started; the new one is never there before the run returns.
    assert f"took away {ws.env_file} (flydsl 0.2.2, built): the tree in {ws.root} changes now for the pin " \
           "v0.2.3" in out.stdout, out.stdout
    assert not os.path.exists(ws.env_file)
    assert os.path.exists(ws.env_json) == twin_left
    if twin_left:
        assert ws.env_twin()["commit"] == new  # written just before the env file, for the new pin
    again = ws.run("--json", FLYDSL_PIN="v0.2.3")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["commit"] == new
    assert_finished_build_of(ws, new)
    assert ws.count("build") == builds and ws.count("llvm") == 1  # both pins name one LLVM commit


def test_kill_9_of_a_detached_worker_at_a_point_is_noticed(ws: Workspace) -> None:
    out = ws.run("start", ENSURE_FLYDSL_FAULT="fixes-applied")
    assert out.returncode == 0
    waited = ws.run("wait", "--timeout", "60", timeout=90)
    assert waited.returncode == 9, waited.stdout
    wait_for(ws.fail_marker)
    assert ws.marker()["exit_code"] == 9 and ws.marker()["stage"] == "fixes"
    assert ws.run().returncode == 0
    assert_one_tree(ws)


def test_an_api_run_killed_at_a_point_leaves_its_timing_record_in_its_own_cache_folder(
        ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """``ensure(environ=...)`` names the run's cache folder; the run is killed -9.  Its watchdog records the death
    with the run's environment: it was given this process's, and put the killed run's timing record elsewhere."""
    caches = {name: os.path.join(str(tmp_path), name) for name in ("run's", "process'")}
    code = "import os, ensure_flydsl; ensure_flydsl.ensure(environ=dict(os.environ, XDG_CACHE_HOME=os.environ['RUNS']))"
    out = subprocess.run([sys.executable, "-c", code], env=dict(ws.env, ENSURE_FLYDSL_FAULT="fixes-applied",
                         XDG_CACHE_HOME=caches["process'"], RUNS=caches["run's"]), start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)
    assert out.returncode == -signal.SIGKILL, out.stderr
    folders = {name: timings_dir(str(host_cache_dir({"XDG_CACHE_HOME": cache}))) for name, cache in caches.items()}
    deadline = time.monotonic() + 30
    while not any(os.path.isdir(folder) and os.listdir(folder) for folder in folders.values()):
        assert time.monotonic() < deadline, "no timing record of the killed run"
        time.sleep(0.05)
    [name] = os.listdir(folders["run's"])
    with open(os.path.join(folders["run's"], name)) as handle:
        assert json.load(handle)["exit_code"] == 9
