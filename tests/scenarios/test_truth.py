"""`wait` and `status` answer from what is true (issue 9, items 1 and 2), not from the newest run record.

Each test here failed before the fix: an impatient caller poisoned `wait`; a replaced env file still
answered `wait` with 0; sibling roots in one folder took each other's failure marker for their own.
"""

from __future__ import annotations

import json
import os
import signal
import time

from tests.helpers.scenario import start, status, wait_for
from tests.helpers.workspace import Workspace


def test_a_caller_that_gives_up_on_the_lock_does_not_poison_wait(ws: Workspace) -> None:
    start(ws, FIXTURE_BUILD_SLEEP="1.5")
    wait_for(os.path.join(ws.counter, "build.started"))
    impatient = ws.run(FLYDSL_LOCK_TIMEOUT="0.5")
    assert impatient.returncode == 7, impatient.stderr
    assert not os.path.exists(ws.fail_marker), "a file poller would see a failure while the build goes on"
    assert status(ws)["state"] == "running"
    assert ws.run("wait", "--timeout", "0.01").returncode == 75
    done = ws.run("wait", "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert status(ws)["state"] == "succeeded"
    assert ws.run("wait", "--timeout", "0.01").returncode == 0
    assert not os.path.exists(ws.fail_marker)


def _wait_for_lock_waiter(ws: Workspace, proc_pid: int) -> None:
    """Until the blocking caller is waiting for the lock (its record says step "lock")."""
    folder = os.path.join(ws.base, ".ensure_flydsl", "runs", "FlyDSL")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for name in os.listdir(folder):
            if name.endswith(".json"):
                with open(os.path.join(folder, name)) as handle:
                    try:
                        record = json.load(handle)
                    except ValueError:
                        continue
                if record.get("pid") == proc_pid and record.get("step") == "lock":
                    return
        time.sleep(0.05)
    raise AssertionError("the second caller never waited for the lock")


def test_a_caller_killed_while_waiting_for_the_lock_does_not_poison_wait(ws: Workspace) -> None:
    for sig in (signal.SIGKILL, signal.SIGTERM):
        ws.run("clean")
        start(ws, FIXTURE_BUILD_SLEEP="1.5")
        wait_for(os.path.join(ws.counter, "build.started"))
        waiter = ws.popen()
        _wait_for_lock_waiter(ws, waiter.pid)
        os.kill(waiter.pid, sig)
        waiter.communicate(timeout=30)
        assert waiter.returncode in (-9, 130), (sig, waiter.returncode)
        time.sleep(0.3)  # the killed caller's watchdog has had its moment
        assert status(ws)["state"] == "running", sig
        assert not os.path.exists(ws.fail_marker), sig
        done = ws.run("wait", "--timeout", "60")
        assert done.returncode == 0, (sig, done.stdout + done.stderr)
        assert status(ws)["state"] == "succeeded"
        assert not os.path.exists(ws.fail_marker)
        os.unlink(os.path.join(ws.counter, "build.started"))


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


def test_two_pins_back_to_back_each_wait_tells_the_truth(ws: Workspace) -> None:
    p1, p2 = ws.repo.commits["dev"], ws.repo.commits["llvm-b"]
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # each pin's own tree (with the version-only gate, P1's answers P2)
    start(ws, FLYDSL_PIN=p1, FIXTURE_BUILD_SLEEP="0.5")
    start(ws, FLYDSL_PIN=p2)
    first = ws.run("wait", "--timeout", "60", FLYDSL_PIN=p1)
    # When the wait for P1 says 0, the env file it names answered P1 at that moment: P2's run (waiting for
    # the lock) takes it away only after.
    assert first.returncode in (0, 1), first.stdout
    second = ws.run("wait", "--timeout", "60", FLYDSL_PIN=p2)
    assert second.returncode == 0, second.stdout
    assert ws.env_twin()["commit"] == p2
    after = ws.run("wait", "--timeout", "0.01", FLYDSL_PIN=p1)
    assert after.returncode == 1, after.stdout
    assert status(ws, FLYDSL_PIN=p1)["state"] == "absent"
    assert status(ws, FLYDSL_PIN=p2)["state"] == "succeeded"


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
