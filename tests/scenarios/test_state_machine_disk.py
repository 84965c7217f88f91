"""A full file system at every step (issue 26, item 12): a model-based test whose root and base folder (lock,
marker, log, run records) are on a small tmpfs (tests/helpers/full_disk.py), filled to its last byte at a
random moment: between two commands, or during a build (the fixture build's FIXTURE_STAGED_HOOK holds at a
barrier while the test fills the disk), while `ensure`, `start`, `wait`, `status`, `clean` and `verify` run.

Invariants, for every command and every run that ends:

1. its exit code is one the README documents, never 70, and it prints no traceback;
2. a blocking `ensure` that failed left the failure marker naming its request (each at a path of its own,
   FLYDSL_BUILD_FAILED: the next run withdraws the default one before it does anything), or said in its line
   that the marker could not be written (or why it was not: another run answers), or its request is
   answered now;
3. `status --json` answers (exit 0, one JSON object) after every step, full or not;
4. once the room is given back (and the runs in flight have ended), the next `ensure` succeeds.

ENSURE_FLYDSL_SM_DISK_EXAMPLES / ENSURE_FLYDSL_SM_DISK_STEPS run it longer.  Mounting needs root: elsewhere the
test is skipped, saying why.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Counter, Dict, List, Optional

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from ensure_flydsl.errors import ExitCode
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.full_disk import FullDisk, full_disk
from tests.helpers.reliability import record, tmpfs
from tests.helpers.scenario import Barrier
from tests.helpers.state_model import TAG_VAR, kill_tagged, make_sm_repo, survivors

EXAMPLES = int(os.environ.get("ENSURE_FLYDSL_SM_DISK_EXAMPLES") or 4)
STEPS = int(os.environ.get("ENSURE_FLYDSL_SM_DISK_STEPS") or 15)
HANG_GUARD_S = 120.0  # a hang guard, not a performance target
PINS = ("P1", "P2")
# What the README's table documents, but 70 (a bug): every command's exit code must be one of these.
DOCUMENTED = {int(code) for code in ExitCode} - {int(ExitCode.INTERNAL)} | {1}  # 1: `wait`/`env`, nothing answers

STATS: Counter[str] = collections.Counter()
_REPO: List[FixtureRepo] = []
_WORK: List[str] = []


def _cmd(*args: str) -> List[str]:
    return [sys.executable, "-m", "ensure_flydsl", *args]


class Run:
    """A background `ensure` or a `start`'s worker, and what it said (stdout and stderr, off the full disk)."""

    def __init__(self, kind: str, pin: str, out: str, popen: Optional["subprocess.Popen[bytes]"] = None,
                 pid: Optional[int] = None, run_id: Optional[str] = None, marker: str = "") -> None:
        self.kind, self.pin, self.out, self.popen, self.pid, self.run_id = kind, pin, out, popen, pid, run_id
        self.marker = marker  # its own failure marker (FLYDSL_BUILD_FAILED): no other run removes it
        self.checked = False

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            with open(f"/proc/{self.pid}/stat") as handle:
                return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False


class DiskMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.repo = _REPO[0]
        self.dir = tempfile.mkdtemp(prefix="smd-", dir=_WORK[0])
        self.stack = contextlib.ExitStack()
        self.disk: FullDisk = self.stack.enter_context(full_disk(os.path.join(self.dir, "disk"), "600m"))
        self.base = os.path.join(self.disk.path, "base")
        self.root = os.path.join(self.base, "FlyDSL")
        os.makedirs(self.base)
        self.tag = "smd-" + uuid.uuid4().hex
        self.pin = PINS[0]
        self.full = False
        self.runs: List[Run] = []
        self.serial = 0
        self.steps: List[str] = []
        STATS["examples"] += 1

    # -- helpers ---------------------------------------------------------------------------------------------
    def note(self, *step: object) -> None:
        self.steps.append(" ".join(str(s) for s in step) + (" [full]" if self.full else ""))

    def env(self, **extra: str) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        self.serial += 1
        counter = os.path.join(self.dir, "counters", str(self.serial))  # the fixture's traces: off the disk
        os.makedirs(counter)
        env.update({"FLYDSL_REPO": self.repo.url, "FLYDSL_PYTHON": sys.executable, "FLYDSL_STRATEGY": "source",
                    "FLYDSL_EXACT_PIN": "1", "ROCM_PATH": os.path.join(self.dir, "no-rocm"),
                    "FIXTURE_COUNTER_DIR": counter, TAG_VAR: self.tag})
        env.update(extra)
        return env

    def args(self, pin: Optional[str] = None) -> List[str]:
        return ["--root", self.root, "--pin", self.repo.commits[pin or self.pin]]

    def command(self, *args: str, timeout: float = HANG_GUARD_S) -> "subprocess.CompletedProcess[str]":
        out = subprocess.run(_cmd(*args, *self.args()), env=self.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)
        self.documented(f"{args[0]}", out.returncode, out.stdout + out.stderr)
        return out

    def documented(self, what: str, code: Optional[int], said: str) -> None:
        """Invariant 1."""
        STATS[f"exit:{what}:{code}{':full' if self.full else ''}"] += 1
        assert code in DOCUMENTED, f"{what} exited {code}; steps: {self.steps}\n{said[-3000:]}"
        assert "Traceback" not in said and "internal error" not in said, f"{what}: {said[-3000:]}"

    def answered(self, pin: str) -> bool:
        try:
            with open(os.path.join(self.root, "flydsl_env.json")) as handle:
                twin = json.load(handle)
        except (OSError, ValueError):
            return False
        request = twin.get("request") if isinstance(twin, dict) else None
        return os.path.isfile(os.path.join(self.root, "flydsl_env.sh")) and isinstance(request, dict) \
            and request.get("pin") == self.repo.commits[pin]

    def own_marker(self) -> Dict[str, str]:
        """A failure marker of the command's own, beside the default one (the next run for the root withdraws
        the default one before it does anything: a run's marker is judged at its own path)."""
        return {"FLYDSL_BUILD_FAILED": os.path.join(self.base, f".flydsl_build.{self.serial}.failed")}

    def marker_names(self, pin: str, marker: str) -> bool:
        try:
            with open(marker) as handle:
                marker = json.load(handle)
        except (OSError, ValueError):
            return False
        request = marker.get("request") if isinstance(marker, dict) else None
        return isinstance(request, dict) and request.get("pin") == self.repo.commits[pin]

    def reap(self) -> None:
        """Invariants 1 and 2 for each run that ended since the last look."""
        for run in self.runs:
            if run.checked or run.alive():
                continue
            run.checked = True
            with open(run.out, errors="replace") as handle:
                said = handle.read()
            if run.popen is None:  # a worker: how it ended is in its run record
                code = self.worker_code(run)
                STATS[f"worker:exit{code}"] += 1
                if code is not None:
                    self.documented("worker", code, "")
                continue
            self.ensure_ended(run.pin, run.popen.returncode, said, run.marker)

    def ensure_ended(self, pin: str, code: int, said: str, marker: str) -> None:
        """Invariants 1 and 2 for an `ensure` that ended (``marker``: its own failure marker's path)."""
        self.documented("ensure", code, said)
        if code != 0:
            told = (self.marker_names(pin, marker) or "could not be written" in said or "not writing" in said
                    or self.answered(pin))
            STATS["check:marker_or_said"] += 1
            assert told, (f"invariant 2: ensure for {pin} exited {code} with no failure marker for its request "
                          f"and no word about it; steps: {self.steps}\n{said[-3000:]}")

    def worker_code(self, run: Run) -> Optional[int]:
        path = os.path.join(self.base, ".ensure_flydsl", "runs", "FlyDSL", f"{run.run_id}.json")
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            return None  # on a full disk its record may not have been written: `status` tells the rest
        failure = data.get("failure") if isinstance(data, dict) else None
        if isinstance(failure, dict) and isinstance(failure.get("exit_code"), int):
            return int(failure["exit_code"])
        return 0 if isinstance(data, dict) and data.get("state") == "succeeded" else None

    def live(self) -> List[Run]:
        return [run for run in self.runs if run.alive()]

    def settle_runs(self) -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        for run in self.runs:
            while run.alive():
                assert time.monotonic() < deadline, f"a run ({run.kind} {run.pin}) still runs; steps: {self.steps}"
                time.sleep(0.05)
        self.reap()

    def fill(self) -> None:
        if not self.full:
            self.disk.fill()
            self.full = True

    # -- rules -------------------------------------------------------------------------------------------------
    @rule(pin=st.sampled_from(PINS))
    def change_pin(self, pin: str) -> None:
        self.note("use pin", pin)
        self.pin = pin

    @rule(slow=st.sampled_from([None, "0.3"]), fill_mid_build=st.booleans())
    def ensure(self, slow: Optional[str], fill_mid_build: bool) -> None:
        """A blocking `ensure` in the background; with ``fill_mid_build`` the disk fills once its build has
        staged the package (a barrier in the fixture's build.sh), before the compiled part is written."""
        self.note("ensure&", self.pin, f"slow={slow}" if slow else "", "fill mid-build" if fill_mid_build else "")
        extra: Dict[str, str] = {"FIXTURE_BUILD_SLEEP": slow} if slow else {}
        barrier = Barrier(os.path.join(self.dir, f"barrier-{self.serial}"), "staged") if fill_mid_build else None
        if barrier is not None:
            extra["FIXTURE_STAGED_HOOK"] = barrier.hook
        out = os.path.join(self.dir, f"ensure-{self.serial}.out")
        extra.update(self.own_marker())
        with open(out, "wb") as log:
            popen = subprocess.Popen(_cmd("ensure", *self.args()), env=self.env(**extra), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.runs.append(Run("ensure", self.pin, out, popen=popen, marker=extra["FLYDSL_BUILD_FAILED"]))
        if barrier is None:
            return
        deadline = time.monotonic() + 30
        while popen.poll() is None and not os.path.exists(barrier.reached) and time.monotonic() < deadline:
            time.sleep(0.02)  # no build (warm, or another run's), or waiting for the lock: no fill then
        if os.path.exists(barrier.reached):
            STATS["fill:mid_build"] += 1
            self.fill()
        barrier.release()

    @rule()
    def start(self) -> None:
        self.note("start", self.pin)
        out = subprocess.run(_cmd("start", *self.args()), env=self.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S, check=False)
        self.documented("start", out.returncode, out.stdout + out.stderr)
        assert out.returncode in (0, 5), f"start exited {out.returncode}: {out.stderr}"
        if out.returncode == 0:
            data = json.loads(out.stdout.strip().splitlines()[-1])
            if not data.get("joined"):
                log = os.path.join(self.dir, f"start-{self.serial}.out")
                open(log, "w").close()
                self.runs.append(Run("worker", self.pin, log, pid=int(data["pid"]), run_id=str(data["run_id"])))

    @rule(timeout=st.sampled_from(["0", "1"]))
    def wait(self, timeout: str) -> None:
        self.note("wait --timeout", timeout)
        self.command("wait", "--timeout", timeout)

    @rule()
    def clean(self) -> None:
        self.note("clean")
        out = self.command("clean")
        assert out.returncode in (0, int(ExitCode.LOCK)), f"clean exited {out.returncode}: {out.stdout}{out.stderr}"

    @rule()
    def verify(self) -> None:
        self.note("verify")
        self.command("verify")

    @rule(then=st.sampled_from([None, "ensure", "start", "wait", "clean", "verify"]), room_after=st.booleans())
    def fill_now(self, then: Optional[str], room_after: bool) -> None:
        """The disk fills to its last byte now, whatever runs (between two commands, or mid-run); ``then`` a
        command runs on it at once, and with ``room_after`` the room is given back (make_room)."""
        self.note("fill", f"then {then}" if then else "", "then make room" if room_after else "")
        STATS["fill:" + ("while_running" if self.live() else "quiet")] += 1
        self.fill()
        if then == "ensure":
            own = self.own_marker()
            out = subprocess.run(_cmd("ensure", *self.args()), env=self.env(**own), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True, timeout=HANG_GUARD_S, check=False)
            self.ensure_ended(self.pin, out.returncode, out.stdout, own["FLYDSL_BUILD_FAILED"])
        elif then == "start":
            self.start()
        elif then == "wait":
            self.wait("0")
        elif then == "clean":
            self.clean()
        elif then == "verify":
            self.verify()
        if room_after:
            self.make_room()

    @rule()
    def make_room(self) -> None:
        """Invariant 4: the room is given back; once the runs in flight have ended, `ensure` succeeds."""
        if not self.full:
            return
        self.note("drain, settle, ensure")
        self.disk.drain()
        self.full = False
        self.settle_runs()
        out = self.command("ensure")
        STATS[f"rerun:exit{out.returncode}"] += 1
        assert out.returncode == 0, f"invariant 4: ensure after making room exited {out.returncode}; steps: " \
                                    f"{self.steps}\n{out.stdout[-2000:]}{out.stderr[-3000:]}"

    @rule()
    def settle(self) -> None:
        self.note("settle")
        self.settle_runs()
        left = survivors(self.tag)
        assert not left, "processes outlived their runs:\n" + "\n".join(left)

    # -- invariants ------------------------------------------------------------------------------------------------
    @invariant()
    def answers(self) -> None:
        STATS["steps"] += 1
        self.reap()
        out = subprocess.run(_cmd("status", "--json", *self.args()), env=self.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, timeout=HANG_GUARD_S, check=False)
        self.documented("status", out.returncode, out.stdout + out.stderr)
        assert out.returncode == 0, f"invariant 3: status exited {out.returncode}: {out.stderr}"
        STATS["status:" + str(json.loads(out.stdout)["state"]) + (":full" if self.full else "")] += 1

    def teardown(self) -> None:
        for run in self.runs:
            if run.alive() and run.pid is None and run.popen is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.popen.pid, signal.SIGKILL)
        kill_tagged(self.tag)
        for run in self.runs:
            if run.popen is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.popen.wait(timeout=30)
        kill_tagged(self.tag)
        self.stack.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def smd_repo(tmp_path_factory: pytest.TempPathFactory) -> FixtureRepo:
    return make_sm_repo(str(tmp_path_factory.mktemp("smd-upstream") / "FlyDSL.git"))


@pytest.mark.long  # minutes: collected first (tests/conftest.py)
def test_state_machine_on_a_full_disk(smd_repo: FixtureRepo, tmp_path_factory: pytest.TempPathFactory) -> None:
    work = str(tmp_path_factory.mktemp("smd-work"))
    with tmpfs(os.path.join(work, "can-mount"), "1m"):  # skipped, saying why, where no tmpfs can be mounted
        pass
    _REPO[:] = [smd_repo]
    _WORK[:] = [work]
    config = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=False,
                      print_blob=True, suppress_health_check=list(HealthCheck))
    try:
        run_state_machine_as_test(DiskMachine, settings=config)
    finally:
        record("state_machine_disk", examples=EXAMPLES, steps=STEPS, stats=dict(sorted(STATS.items())))
