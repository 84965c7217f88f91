"""Every failure path of the contract: its exit code, its failure marker, and its message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from typing import Dict, List

import pytest

from ensure_flydsl.errors import Stage
from ensure_flydsl.layout import runs_dir
from ensure_flydsl.runs.liveness import leave_failure_marker
from ensure_flydsl.runs.markers import Failure, read_env_json
from tests.helpers.inotify import Renames
from tests.helpers.scenario import Barrier, assert_one_tree, ensure_json, wait_for
from tests.helpers.workspace import Workspace


def check_marker(ws: Workspace, code: int, stage: str, **env: str) -> Dict[str, object]:
    """The failure marker of a run with ``ws``'s settings and ``env`` over them: its code, stage, reason, log
    tail, and the request it failed for (the one asked, never an empty one)."""
    marker = ws.marker()
    assert marker["exit_code"] == code and marker["stage"] == stage
    assert marker["reason"] and isinstance(marker["log_tail"], list)
    asked = dict(ws.env, **env)
    request = marker["request"]
    assert isinstance(request, dict), marker
    expected = {"root": ws.root, "pin": asked["FLYDSL_PIN"], "repo": asked["FLYDSL_REPO"],
                "python": sys.executable, "strategy": asked["FLYDSL_STRATEGY"],
                "exact_pin": asked.get("FLYDSL_EXACT_PIN") == "1"}
    assert {key: request.get(key) for key in expected} == expected, request
    # Never a success marker for the failed request beside its failure; another request's install, which a
    # run refused before its build started leaves in place, may be there.
    assert not os.path.exists(ws.env_file) or ws.env_twin()["request"] != request
    return marker


def test_exit_2_clone_fails(ws: Workspace) -> None:
    out = ws.run(FLYDSL_REPO="file:///nonexistent/FlyDSL.git")
    assert out.returncode == 2
    assert "failed (exit 2: clone/fetch failed, stage fetch): cannot list the refs of file:///nonexistent" in out.stderr
    assert "return code: 128" in out.stderr and "next: check that FLYDSL_REPO is reachable" in out.stderr
    check_marker(ws, 2, "fetch", FLYDSL_REPO="file:///nonexistent/FlyDSL.git")


def test_exit_2_submodule_fails(ws: Workspace, own_repo, tmp_path: "os.PathLike[str]") -> None:  # type: ignore[no-untyped-def]
    import shutil

    from tests.helpers.flydsl_fixture import add_submodule

    sub = os.path.join(str(tmp_path), "dlpack.git")
    sha = add_submodule(own_repo, sub, "with-sub")
    shutil.rmtree(sub)  # the submodule's repository is gone: the update must fail loudly
    out = ws.run(FLYDSL_REPO=own_repo.url, FLYDSL_PIN=sha)
    assert out.returncode == 2
    assert "git submodule update" in out.stderr and "stage submodules" in out.stderr
    check_marker(ws, 2, "submodules", FLYDSL_REPO=own_repo.url, FLYDSL_PIN=sha)


def test_exit_3_pin_not_found(ws: Workspace) -> None:
    out = ws.run(FLYDSL_PIN="v9.9.9")
    assert out.returncode == 3
    assert "the pin v9.9.9 is not a commit, tag or branch of" in out.stderr
    check_marker(ws, 3, "checkout", FLYDSL_PIN="v9.9.9")


@pytest.mark.parametrize("pin", ["HEAD", "FETCH_HEAD"])
def test_exit_3_a_pin_naming_no_ref_of_the_repository(ws: Workspace, pin: str) -> None:
    """A name the repository has no tag or branch of was resolved in the root as git reads it: HEAD built whatever
    the root had checked out before (not the repository's HEAD), and stamped it as the pin."""
    assert ws.run().returncode == 0
    out = ws.run(FLYDSL_PIN=pin, FLYDSL_EXACT_PIN="1")
    assert out.returncode == 3 and f"the pin {pin} is not a commit, tag or branch of" in out.stderr, out.stderr


def test_exit_3_unknown_full_hash(ws: Workspace) -> None:
    out = ws.run(FLYDSL_PIN="0123456789abcdef0123456789abcdef01234567")
    assert out.returncode == 3 and "is not a commit, tag or branch" in out.stderr
    check_marker(ws, 3, "checkout", FLYDSL_PIN="0123456789abcdef0123456789abcdef01234567")


def test_exit_3_checkout_blocked_by_local_edits(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    with open(os.path.join(ws.root, "kernels", "moe_gemm_2stage.py"), "a") as handle:
        handle.write("# somebody's edit in the tool's checkout\n")
    twin = ws.env_twin()
    out = ws.run(FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    assert out.returncode == 3
    assert ws.env_twin() == twin and os.path.exists(ws.env_file)  # refused before the build starts: kept
    assert "local changes to tracked files (kernels/moe_gemm_2stage.py)" in out.stderr
    assert "never overwrites them" in out.stderr
    check_marker(ws, 3, "checkout", FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    assert "somebody's edit" in open(os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")).read()


def test_exit_4_llvm_build_fails(ws: Workspace) -> None:
    out = ws.run(FIXTURE_LLVM_FAIL="1")
    assert out.returncode == 4
    assert "the LLVM/MLIR build failed: scripts/build_llvm.sh exited with 1" in out.stderr
    assert "fixture LLVM failure" in out.stderr and f"last lines of the log ({ws.log})" in out.stderr
    marker = check_marker(ws, 4, "llvm")
    assert marker["log"] == ws.log
    assert any("fixture LLVM failure" in line for line in marker["log_tail"])  # type: ignore[union-attr]


def test_exit_4_foreign_llvm_project_is_not_built_into(ws: Workspace) -> None:
    foreign = os.path.join(ws.base, "llvm-project")
    os.makedirs(foreign)
    with open(os.path.join(foreign, "mine.txt"), "w") as handle:
        handle.write("keep")
    out = ws.run()
    assert out.returncode == 4 and "was not made by ensure-flydsl" in out.stderr
    assert os.listdir(foreign) == ["mine.txt"]
    check_marker(ws, 4, "llvm")


def test_exit_5_flydsl_build_fails_then_recovers(ws: Workspace) -> None:
    out = ws.run(FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 5
    assert "the FlyDSL build failed: scripts/build.sh exited with 1" in out.stderr
    assert "fixture build failure" in out.stderr
    marker = check_marker(ws, 5, "build")
    assert any("fixture build failure" in line for line in marker["log_tail"])  # type: ignore[union-attr]
    again = ws.run()
    assert again.returncode == 0, again.stderr
    assert not os.path.exists(ws.fail_marker)
    assert ws.count("llvm") == 1  # the finished LLVM step is not redone


def test_exit_6_built_but_probe_fails(ws: Workspace) -> None:
    out = ws.run(FIXTURE_BUILD_NO_MLIR="1")
    assert out.returncode == 6
    assert "built, but the import probe fails: kernels.moe_gemm_2stage does not import" in out.stderr
    assert "flydsl._mlir" in out.stderr
    check_marker(ws, 6, "verify")
    # Not exit 6 forever (the seed's failure): the build is redone once it can succeed.
    again = ws.run()
    assert again.returncode == 0, again.stderr
    assert_one_tree(ws)


def test_exit_6_after_the_rebuild_of_a_damaged_tree_leaves_the_build_unfinished(ws: Workspace) -> None:
    ws.env["FLYDSL_STORE"] = "off"  # built again, not copied from the host store
    assert ws.run().returncode == 0
    os.unlink(os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs", "_mlir.py"))
    out = ws.run(FIXTURE_BUILD_NO_MLIR="1")
    assert out.returncode == 6 and "building it again" in out.stdout
    builds = ws.count("build")
    # The rebuild that does not import is not taken for a finished build: the next run builds at once.
    again = ws.run()
    assert again.returncode == 0, again.stderr
    assert "building it again" not in again.stdout and ws.count("build") == builds + 1
    assert_one_tree(ws)


def _hold_lock(path: str) -> subprocess.Popen:
    """Another process holding the build lock, recorded the way the tool records itself."""
    code = (
        "import sys, time, json, os, fcntl\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "json.dump({'pid': os.getpid(), 'host': 'buildhost-7', 'started': '2026-11-29T03:00:00+00:00',"
        " 'run_id': 'r-holder'}, open(sys.argv[1] + '.holder', 'w'))\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_exit_7_lock_timeout_names_the_holder(ws: Workspace) -> None:
    os.makedirs(ws.base, exist_ok=True)
    holder = _hold_lock(ws.lock_file)
    try:
        started = time.monotonic()
        out = ws.run("--lock-timeout", "1")
        assert time.monotonic() - started < 20
        assert out.returncode == 7
        assert f"could not take the build lock {ws.lock_file} within 1 s" in out.stderr
        assert f"pid {holder.pid} on host buildhost-7 since 2026-11-29T03:00:00+00:00 (run r-holder)" in out.stderr
        assert "waiting for the build lock" in out.stdout
        check_marker(ws, 7, "lock")
    finally:
        holder.kill()
        holder.wait()
    assert os.path.exists(ws.lock_file)
    assert ws.run().returncode == 0  # the holder died: its flock went with it


def test_exit_7_lock_wait_ends_when_the_holder_releases(ws: Workspace) -> None:
    holder = _hold_lock(ws.lock_file)
    proc = ws.popen("--lock-timeout", "30")
    assert proc.stdout is not None
    said = []
    waiting = (f"waiting for the build lock {ws.lock_file}, held by pid {holder.pid} on host buildhost-7 since "
               "2026-11-29T03:00:00+00:00 (run r-holder); waited 0 s, waiting up to 30 s")
    while not any(waiting in line for line in said):  # the run says it waits (an end of output fails below)
        line = proc.stdout.readline()
        assert line, "".join(said) + proc.communicate(timeout=60)[1]
        said.append(line)
    assert proc.poll() is None and ws.count("build") == 0 and not os.path.exists(ws.fail_marker)
    holder.kill()
    holder.wait()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "could not take the build lock" not in out + err
    assert ws.count("build") == 1 and not os.path.exists(ws.fail_marker)


def test_exit_64_bad_input_touches_nothing(ws: Workspace) -> None:
    out = ws.run(FLYDSL_JOBS="0")
    assert out.returncode == 64
    expected = "FLYDSL_JOBS='0' is not allowed: a whole number of parallel jobs from 1 to 4096"
    assert out.stderr == f"ensure-flydsl: {expected}\n"
    assert out.stdout == ""
    assert os.listdir(ws.base) == [".flydsl_build.failed"]  # the marker for pollers, nothing else
    marker = ws.marker()
    assert marker["exit_code"] == 64 and marker["stage"] == "settings" and "FLYDSL_JOBS" in str(marker["reason"])


def test_exit_64_marker_folder_missing_creates_nothing(tmp_path: "os.PathLike[str]", ws: Workspace) -> None:
    root = os.path.join(str(tmp_path), "nowhere", "FlyDSL")
    out = ws.run(FLYDSL_ROOT=root, FLYDSL_STRATEGY="fast")
    assert out.returncode == 64 and "FLYDSL_STRATEGY='fast'" in out.stderr
    assert not os.path.exists(os.path.dirname(root))


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"FLYDSL_MIN_VERSION": "zero"}, "FLYDSL_MIN_VERSION='zero' is not allowed"),
        ({"FLYDSL_PIN": "--upload-pack=touch PWNED"}, "FLYDSL_PIN='--upload-pack=touch PWNED' is not allowed"),
        ({"FLYDSL_REPO": "-c core.sshCommand=touch PWNED"}, "FLYDSL_REPO='-c core.sshCommand=touch PWNED' is"),
        ({"FLYDSL_REPO": "ext::sh -c touch% PWNED"}, "FLYDSL_REPO='ext::sh -c touch% PWNED' is not allowed"),
        ({"FLYDSL_PYTHON": "/nonexistent/python3"}, "FLYDSL_PYTHON='/nonexistent/python3' is not allowed"),
        ({"FLYDSL_PYTHON": "/bin/false"}, "FLYDSL_PYTHON='/bin/false' is not allowed"),
        ({"FLYDSL_STRATEGY": "fast"}, "FLYDSL_STRATEGY='fast' is not allowed: one of auto, source"),
        ({"FLYDSL_ROOT": "/"}, "FLYDSL_ROOT='/' is not allowed"),
        ({"MLIR_PATH": "/nonexistent/mlir"}, "MLIR_PATH='/nonexistent/mlir' is not allowed"),
    ],
)
def test_exit_64_table(ws: Workspace, env: Dict[str, str], expected: str) -> None:
    out = ws.run(**env)
    assert out.returncode == 64, out.stderr
    assert out.stderr.startswith("ensure-flydsl: " + expected)
    assert out.stderr.count("\n") == 1
    assert not os.path.exists(ws.root) and not os.path.exists(os.path.join(ws.base, "PWNED"))
    assert not os.path.exists("PWNED")


def test_exit_64_flag_is_named(ws: Workspace) -> None:
    out = ws.run("--jobs", "-2")
    assert out.returncode == 64 and out.stderr.startswith("ensure-flydsl: --jobs='-2' is not allowed")
    out = ws.run("--root", "")
    assert out.returncode == 64 and "--root=''" in out.stderr


def test_exit_64_root_under_a_file(ws: Workspace) -> None:
    blocker = os.path.join(ws.base, "file")
    with open(blocker, "w") as handle:
        handle.write("x")
    out = ws.run(FLYDSL_ROOT=os.path.join(blocker, "FlyDSL"))
    assert out.returncode == 64 and "is a file, so nothing can be created under it" in out.stderr


def test_exit_64_lock_path_symlink(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    target = os.path.join(str(tmp_path), "elsewhere")
    with open(target, "w") as handle:
        handle.write("not yours")
    os.symlink(target, ws.lock_file)
    out = ws.run()
    assert out.returncode == 64 and "symbolic link" in out.stderr and "FLYDSL_BUILD_LOCK" in out.stderr
    assert open(target).read() == "not yours"


def test_exit_64_no_git_on_path(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    empty = os.path.join(str(tmp_path), "emptybin")
    os.makedirs(empty)
    out = ws.run(PATH=empty + ":/nonexistent")
    assert out.returncode == 64 and "git" in out.stderr


def test_exit_70_internal_error(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    stamps = os.path.join(ws.root, ".ensure_flydsl", "stamps")
    # A state the tool cannot have made: its stamps folder replaced by a file.
    for name in os.listdir(stamps):
        os.unlink(os.path.join(stamps, name))
    os.rmdir(stamps)
    with open(stamps, "w") as handle:
        handle.write("")
    out = ws.run(FLYDSL_PIN="v0.2.3")
    assert out.returncode == 70
    assert "internal error (exit 70)" in out.stderr and "Traceback" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 70 and "internal error" in str(marker["reason"])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_exit_130_interrupted_then_resumes(ws: Workspace, sig: signal.Signals) -> None:
    proc = ws.popen(FIXTURE_BUILD_SLEEP="5")
    wait_for(os.path.join(ws.counter, "build.started"))
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert f"interrupted by {sig.name}" in err
    marker = check_marker(ws, 130, "build")
    assert "interrupted" in str(marker["reason"])
    again = ws.run()
    assert again.returncode == 0, again.stderr
    assert_one_tree(ws)


@pytest.mark.parametrize("how", ["build fails", "SIGTERM"])
def test_the_failure_marker_is_in_place_before_the_failed_record(ws: Workspace, how: str) -> None:
    """`wait` and `status` answer from the run's record: once it says failed, the marker must be there. A
    run wrote its FAILED record first; a `wait` that read it at once returned 130, and the marker was not
    there yet (the suite's SIGTERM-at-start test, once in a while).  The kernel's order of the renames."""
    assert ws.run(FIXTURE_BUILD_FAIL="1").returncode == 5  # the run records' folder exists to be watched
    runs = runs_dir(ws.root)
    renames = Renames(runs, ws.base)
    try:
        if how == "SIGTERM":
            os.unlink(os.path.join(ws.counter, "build.started"))  # the first run's
            proc = ws.popen("--json", FIXTURE_BUILD_SLEEP="5")
            wait_for(os.path.join(ws.counter, "build.started"))
            os.kill(proc.pid, signal.SIGTERM)
        else:
            proc = ws.popen("--json", FIXTURE_BUILD_FAIL="1")
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == (130 if how == "SIGTERM" else 5), err
        (record,) = {path for path, _ in renames.read() if os.path.dirname(path) == runs and path.endswith(".json")}
        assert renames.last_rename(ws.fail_marker) < renames.last_rename(record), renames.seen
    finally:
        renames.close()
    with open(record) as handle:
        assert json.load(handle)["state"] == "failed"


def test_json_failure_object(ws: Workspace) -> None:
    out = ws.run("--json", FIXTURE_BUILD_FAIL="1")
    assert out.returncode == 5
    data = json.loads(out.stdout)
    assert data == {"schema_version": 1, "ok": False, "exit_code": 5, "stage": "build", "built": False,
                    "how": None, "hint": data["hint"], "log": ws.log,  # no env_file or version: no null for GEAK
                    "reason": "the FlyDSL build failed: scripts/build.sh exited with 1", "installed": None,
                    "run_id": data["run_id"], "elapsed_s": data["elapsed_s"]}
    assert isinstance(data["run_id"], str) and data["run_id"] and isinstance(data["elapsed_s"], float)
    events = [json.loads(line) for line in out.stderr.splitlines()]  # stderr: JSON events only
    assert events[-1]["event"] == "failed" and events[-1]["exit_code"] == 5 and events[-1]["log_tail"]


def test_a_lock_timeout_leaves_no_marker_while_the_build_it_waited_for_goes_on(ws: Workspace) -> None:
    """Exit 7 for the impatient caller, but no failure marker: the build that holds the lock is for the same
    request and will answer for it; a poller never sees "failed" while it builds, nor beside its success."""
    building = Barrier(ws.counter, "building")  # the build holds the lock until the impatient caller is done
    builder = ws.popen(FIXTURE_BUILD_HOOK=building.hook)
    building.wait_reached()
    impatient = ws.run("--lock-timeout", "0.2")
    building.release()
    assert impatient.returncode == 7, impatient.stderr
    assert "another run for this request is going and will answer" in impatient.stdout, impatient.stdout
    assert not os.path.exists(ws.fail_marker)
    out, err = builder.communicate(timeout=60)
    assert builder.returncode == 0, err
    assert os.path.exists(ws.env_file) and not os.path.exists(ws.fail_marker)


def test_whether_the_env_file_answers_a_failed_run_reads_its_interpreter_on_the_runs_path(
        ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed run's request names its interpreter by a name the run's PATH finds (``ensure(environ=...)``'s,
    not this process's): when the root's env file is for that interpreter, it answers, and no marker is written."""
    ensure_json(ws)
    twin = read_env_json(ws.env_json)
    assert twin is not None
    request = replace(twin.request, python=os.path.basename(twin.python))  # the same interpreter, by its name
    monkeypatch.setenv("PATH", "/nonexistent")  # this process's PATH finds no such name
    failure = Failure(Stage.BUILD, 5, "build.sh failed", "read the log")
    said: List[str] = []
    for path_env, written in ((os.path.dirname(twin.python), False), ("/nonexistent", True)):
        unseen = leave_failure_marker(ws.fail_marker, failure, request=request, run_id="r1", locked=True, log=None,
                                      log_tail=[], path_env=path_env, say=said.append)
        assert unseen is None and os.path.exists(ws.fail_marker) == written, path_env
    assert said == [f"not writing {ws.fail_marker}: the env file answers this request"]
