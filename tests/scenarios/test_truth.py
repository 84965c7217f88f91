"""`wait` and `status` answer from what is true (issue 9, items 1 and 2), not from the newest run record.

Each test here failed before the fix: an impatient caller poisoned `wait`; a replaced env file still
answered `wait` with 0; sibling roots in one folder took each other's failure marker for their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.helpers.flydsl_fixture import KERNEL, LLVM_HASH_B, FixtureRepo
from tests.helpers.reliability import kill_group
from tests.helpers.scenario import Barrier, run_record_of, start, status, wait_until, watchdogs_of
from tests.helpers.workspace import Workspace


def test_a_caller_that_gives_up_on_the_lock_does_not_poison_wait(ws: Workspace) -> None:
    barrier = Barrier(ws.counter, "build")  # the build goes on until the impatient caller's answer is checked
    start(ws, FIXTURE_BUILD_HOOK=barrier.hook)
    barrier.wait_reached()
    impatient = ws.run(FLYDSL_LOCK_TIMEOUT="0.5")
    assert impatient.returncode == 7, impatient.stderr
    assert not os.path.exists(ws.fail_marker), "a file poller would see a failure while the build goes on"
    assert status(ws)["state"] == "running"
    assert ws.run("wait", "--timeout", "0.01").returncode == 75
    barrier.release()
    done = ws.run("wait", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert status(ws)["state"] == "succeeded"
    assert ws.run("wait", "--timeout", "0.01").returncode == 0
    assert not os.path.exists(ws.fail_marker)


def test_a_caller_killed_while_waiting_for_the_lock_does_not_poison_wait(ws: Workspace) -> None:
    # The caller's own answer to each signal, and what its run record says once it (or, for kill -9, its
    # watchdog) has recorded the end: the step it died in and the exit code.
    expected = {signal.SIGKILL: (-signal.SIGKILL, 9), signal.SIGTERM: (130, 130)}
    ws.env["FLYDSL_STORE"] = "off"  # each round builds (after `clean` the host store would link the tree)
    for n, sig in enumerate((signal.SIGKILL, signal.SIGTERM)):
        ws.run("clean")
        barrier = Barrier(ws.counter, f"build-{n}")  # the build holds until the killed caller's end is recorded
        start(ws, FIXTURE_BUILD_HOOK=barrier.hook)
        barrier.wait_reached()
        waiter = ws.popen()
        wait_until("the second caller waits for the lock",
                   lambda pid=waiter.pid: run_record_of(ws, pid).get("step") == "lock")
        run_id = str(run_record_of(ws, waiter.pid)["run_id"])
        assert watchdogs_of(run_id), "the caller's watchdog runs"
        os.kill(waiter.pid, sig)
        waiter.communicate(timeout=30)
        assert waiter.returncode == expected[sig][0], (sig, waiter.returncode)
        # Its watchdog has done all it does once it has exited (for kill -9: the record, and no marker).
        wait_until("the killed caller's watchdog exits", lambda run_id=run_id: not watchdogs_of(run_id), timeout=60)
        failure = run_record_of(ws, waiter.pid)["failure"]
        assert isinstance(failure, dict) and (failure["stage"], failure["exit_code"]) == ("lock", expected[sig][1])
        assert status(ws)["state"] == "running", sig
        assert not os.path.exists(ws.fail_marker), sig
        barrier.release()
        done = ws.run("wait", "--timeout", "60")
        assert done.returncode == 0, (sig, done.stdout + done.stderr)
        assert status(ws)["state"] == "succeeded"
        assert not os.path.exists(ws.fail_marker)
    assert ws.count("build") == 2  # one build per round: the killed callers built nothing


def test_wait_does_not_answer_for_an_env_file_another_request_replaced(ws: Workspace) -> None:
    start(ws, "--no-vllm-moe")
    assert ws.run("wait", "--no-vllm-moe", "--timeout", "60").returncode == 0
    start(ws)
    assert ws.run("wait", "--timeout", "60").returncode == 0
    with open(ws.env_file) as handle:
        assert "VLLM_USE_FLYDSL_MOE=1" in handle.read()
    stale = ws.run("wait", "--no-vllm-moe", "--timeout", "0.01")
    assert stale.returncode == 1, stale.stdout
    assert "no longer answers it" in stale.stdout
    data = status(ws, "--no-vllm-moe")
    assert data["state"] == "absent" and "no longer answers it" in str(data["reason"])


def _held_starts(ws: Workspace, after: Barrier, barrier: Barrier) -> str:
    """PYTHONPATH for a run whose interpreters hold at ``barrier`` when they start once ``after`` was released
    (its sitecustomize); the test releases it while the run waits for the lock: the run's next start of an
    interpreter is its requirements check under the lock, before it changes anything."""
    folder = os.path.join(ws.counter, "held-starts")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as handle:
        handle.write(f"import os\nif os.path.exists({after.go!r}):\n    os.system({barrier.hook!r})\n")
    return folder


def test_two_pins_back_to_back_each_wait_tells_the_truth(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    p1 = own_repo.commits["dev"]
    # P2's code imports a module outside the tree and the standard library: its requirements check starts
    # the interpreter under the lock, before its build begins (P1's tree, stamped for P1, is ruled out under
    # --exact-pin with no probe).
    p2 = own_repo.commit("p2", "0.2.2", LLVM_HASH_B,
                         files={"kernels/moe_gemm_2stage.py": KERNEL + "import packaging\n"})
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # each pin's own tree (with the version-only gate, P1's answers P2)
    p1_build = Barrier(ws.counter, "p1-build")  # P1 holds the lock, building
    p2_probe = Barrier(ws.counter, "p2-probe")  # P2 has the lock, P1's env file still in place
    p2_llvm = Barrier(ws.counter, "p2-llvm")  # P2 builds: P1's env file is gone
    start(ws, FLYDSL_PIN=p1, FIXTURE_BUILD_HOOK=p1_build.hook)
    p1_build.wait_reached()
    as_p2 = {"FLYDSL_PIN": p2, "PYTHONPATH": _held_starts(ws, p1_build, p2_probe)}
    second_run = start(ws, FIXTURE_LLVM_HOOK=p2_llvm.hook, **as_p2)
    wait_until("P2 waits for the lock", lambda: run_record_of(ws, int(str(second_run["pid"]))).get("step") == "lock")
    assert ws.run("wait", "--timeout", "0", FLYDSL_PIN=p1).returncode == 75
    assert status(ws, **as_p2)["state"] == "running"
    p1_build.release()
    p2_probe.wait_reached()
    # P1 has finished and P2 has not yet taken its env file away: the wait for P1 says 0.
    first = ws.run("wait", "--timeout", "60", FLYDSL_PIN=p1)
    assert first.returncode == 0, first.stdout
    assert f"succeeded: flydsl 0.2.2 (built) for {sys.executable}; source {ws.env_file}" in first.stdout
    assert ws.env_twin()["commit"] == p1
    p2_probe.release()
    p2_llvm.wait_reached()
    # P2's build has started: the env file that answered P1 is gone, and the wait for P1 says so (1).
    gone = ws.run("wait", "--timeout", "0", FLYDSL_PIN=p1)
    assert gone.returncode == 1, gone.stdout
    assert "nothing to wait for" in gone.stdout and not os.path.exists(ws.env_file)
    assert status(ws, FLYDSL_PIN=p1)["state"] == "absent"
    assert ws.run("wait", "--timeout", "0", **as_p2).returncode == 75
    p2_llvm.release()
    second = ws.run("wait", "--timeout", "60", **as_p2)
    assert second.returncode == 0, second.stdout
    assert ws.env_twin()["commit"] == p2
    after = ws.run("wait", "--timeout", "0.01", FLYDSL_PIN=p1)
    assert after.returncode == 1, after.stdout
    assert status(ws, FLYDSL_PIN=p1)["state"] == "absent"
    assert status(ws, **as_p2)["state"] == "succeeded"
    with open(ws.log) as handle:
        log = handle.read()
    assert log.count(f"took away {ws.env_file} (flydsl 0.2.2, built): the tree in {ws.root} changes now for the "
                     f"pin {p2}") == 1


class Siblings:
    """Roots A, B and C in one folder: the default failure marker, lock and log are shared."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.a = os.path.join(ws.base, "A")
        self.b = os.path.join(ws.base, "B")
        self.c = os.path.join(ws.base, "C")

    def run(self, root: str, *args: str, **env: str) -> "object":
        return self.ws.run(*args, FLYDSL_ROOT=root, **env)


def test_sibling_roots_keep_their_own_failure_markers(ws: Workspace) -> None:
    sib = Siblings(ws)
    failed = ws.run(FLYDSL_ROOT=sib.a, FIXTURE_BUILD_FAIL="1")
    assert failed.returncode == 5
    assert ws.marker()["request"]["root"] == sib.a  # type: ignore[index]
    # B's run neither takes A's marker away nor reports it as its own
    started = ws.run("start", FLYDSL_ROOT=sib.b)
    assert started.returncode == 0, started.stderr
    assert os.path.exists(ws.fail_marker), "B's start took away A's failure marker"
    waited = ws.run("wait", "--timeout", "60", FLYDSL_ROOT=sib.b)
    assert waited.returncode == 0, waited.stdout
    with open(ws.log, errors="replace") as handle:
        assert "report to the same failure marker" in handle.read()
    assert os.path.exists(ws.fail_marker) and ws.marker()["request"]["root"] == sib.a  # type: ignore[index]
    # A root never started is absent: A's marker is not its failure
    never = ws.run("wait", "--timeout", "0.01", FLYDSL_ROOT=sib.c)
    assert never.returncode == 1, never.stdout
    assert status(ws, FLYDSL_ROOT=sib.c)["state"] == "absent"
    assert status(ws, FLYDSL_ROOT=sib.a)["state"] == "failed"
    # clean of B keeps A's marker and the log A writes to
    cleaned = ws.run("clean", FLYDSL_ROOT=sib.b)
    assert cleaned.returncode == 0, cleaned.stderr
    assert os.path.exists(ws.fail_marker) and os.path.exists(ws.log)
    assert f"kept {ws.fail_marker}: it was written for another root" in cleaned.stdout
    # the blocking run of B says so too, and the doctor
    blocking = ws.run(FLYDSL_ROOT=sib.b)
    assert blocking.returncode == 0 and "report to the same failure marker" in blocking.stdout, blocking.stdout
    doctor = ws.run("doctor", "--json", FLYDSL_ROOT=sib.b)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "fail-marker")
    assert check["status"] == "wrong" and sib.a in check["detail"] and "FLYDSL_BUILD_FAILED=" in check["remedy"]
    # with markers of their own, no warning
    own = os.path.join(ws.base, ".flydsl_build.C.failed")
    quiet = ws.run("doctor", "--json", FLYDSL_ROOT=sib.c, FLYDSL_BUILD_FAILED=own)
    check = next(c for c in json.loads(quiet.stdout)["checks"] if c["name"] == "fail-marker")
    assert check["status"] == "ok"


def test_a_run_takes_away_its_own_roots_old_failure_marker(ws: Workspace) -> None:
    """The other side of the sibling rule: a marker that names this root is this root's to replace."""
    assert ws.run(FIXTURE_BUILD_FAIL="1").returncode == 5
    assert os.path.exists(ws.fail_marker)
    assert ws.run().returncode == 0
    assert not os.path.exists(ws.fail_marker)


def test_a_dead_run_whose_marker_cannot_be_written_is_still_recorded_dead(ws: Workspace, tmp_path: str) -> None:
    """A run killed with its watchdog, its marker's folder refusing writes (immutable: EPERM even for root):
    `wait` records the death and says the marker could not be written (it raised before, leaving no record)."""
    folder = os.path.join(str(tmp_path), "markers")
    os.mkdir(folder)
    ws.env["FLYDSL_BUILD_FAILED"] = marker = os.path.join(folder, "build.failed")
    barrier = Barrier(ws.counter, "build")
    started = start(ws, FIXTURE_BUILD_HOOK=barrier.hook)
    barrier.wait_reached()
    run_id = str(started["run_id"])
    for pid in watchdogs_of(run_id):
        os.kill(pid, signal.SIGKILL)
    kill_group(int(str(started["pid"])))
    barrier.release()
    subprocess.run(["chattr", "+i", folder], check=True)
    try:
        out = ws.run("wait", "--timeout", "10")
    finally:
        subprocess.run(["chattr", "-i", folder], check=True)
    assert out.returncode == 9, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert f"the failure marker {marker} could not be written (Operation not permitted)" in out.stdout, out.stdout
    assert not os.path.exists(marker)
    answer = status(ws)
    assert answer["state"] == "failed" and answer["exit_code"] == 9
