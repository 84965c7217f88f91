"""Many callers at once on one root, with real processes: one build for one request, every caller answered
for its own request, lock waits bounded by FLYDSL_LOCK_TIMEOUT, and a lock file that is never deleted, never
replaced and never followed through a symlink."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

from ensure_flydsl.runs.records import RunStore
from ensure_flydsl.settings import Request, load_settings
from tests.helpers.flydsl_fixture import counts
from tests.helpers.reliability import kill_group, record, wait_for_file
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

CALLERS = 16  # of each kind: blocking `ensure` and detached `start` + `wait`
BUILD_SLEEP = "0.7"  # the fixture build's three steps: a build of about 2 s
# A hang guard, not a performance target: the figures (docs/RELIABILITY.md) say how fast it really is.
HANG_GUARD_S = 60.0
DETACHED = '"$0" -m ensure_flydsl start && exec "$0" -m ensure_flydsl wait --timeout 300 --heartbeat 120'


class Caller:
    """One caller process (its own session, like an agent's shell command), timed from launch to exit."""

    def __init__(self, kind: str, argv: List[str], env: Dict[str, str]) -> None:
        self.kind = kind
        self.launched = time.time()
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.out = self.err = ""
        self.ended: Optional[float] = None
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _collect(self) -> None:
        self.out, self.err = self.proc.communicate()
        self.ended = time.time()

    def join(self, timeout: float) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            kill_group(self.proc.pid)
            self.thread.join(10)
            raise AssertionError(f"a {self.kind} caller did not return within {timeout} s")

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.returncode

    def start_json(self) -> Dict[str, object]:
        """The detached caller's `start` line (its last JSON line before `wait` speaks)."""
        lines = [line for line in self.out.splitlines() if line.startswith("{")]
        assert lines, self.out + self.err
        data = json.loads(lines[0])
        assert isinstance(data, dict)
        return data


def blocking(ws: Workspace, env: Dict[str, str]) -> Caller:
    return Caller("ensure", ws.cmd("--json"), env)


def detached(env: Dict[str, str]) -> Caller:
    return Caller("start+wait", ["sh", "-c", DETACHED, sys.executable], env)


class LockWatch(threading.Thread):
    """Looks at the lock file every 2 ms: once it exists it must never vanish, change inode, or be a symlink."""

    def __init__(self, path: str) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.inodes: Set[int] = set()
        self.vanished = 0
        self.symlinks = 0
        self.looks = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                st = os.lstat(self.path)
            except FileNotFoundError:
                self.vanished += 1 if self.inodes else 0
            else:
                self.inodes.add(st.st_ino)
                self.symlinks += 1 if os.path.islink(self.path) else 0
            self.looks += 1
            time.sleep(0.002)

    def stop(self) -> None:
        self.halt.set()
        self.join(5)
        assert len(self.inodes) == 1 and self.vanished == 0 and self.symlinks == 0, (
            f"the lock file changed under its users: inodes {self.inodes}, vanished {self.vanished} times")


@contextlib.contextmanager
def all_succeed(ws: Workspace) -> Iterator[Tuple[List[Caller], "LockWatch"]]:
    """The body launches callers into the list; then every one is waited for (what is left of their groups
    killed), the lock file must have stayed one file throughout, and every caller must have exited 0."""
    watch = LockWatch(ws.lock_file)
    watch.start()
    callers: List[Caller] = []
    try:
        yield callers, watch
        for caller in callers:
            caller.join(HANG_GUARD_S)
    finally:
        for caller in callers:
            kill_group(caller.proc.pid)
    watch.stop()
    failed = [(c.kind, c.returncode, c.out[-2000:], c.err[-2000:]) for c in callers if c.returncode != 0]
    assert not failed, failed


def finished_tree_time(ws: Workspace) -> float:
    with open(os.path.join(ws.root, ".ensure_flydsl", "stamps", "tree.json")) as handle:
        return float(json.load(handle)["time"])


def test_sixteen_blocking_and_sixteen_detached_callers_share_one_build(ws: Workspace) -> None:
    env = dict(ws.env, FIXTURE_BUILD_SLEEP=BUILD_SLEEP)
    with all_succeed(ws) as (callers, watch):
        started = time.time()
        for _ in range(CALLERS):  # interleaved, as fast as processes can be made
            callers.append(blocking(ws, env))
            callers.append(detached(env))
        launched = time.time() - started
    assert ws.count("build") == 1 and ws.count("llvm") == 1, "more than one build for one request"
    commit = ws.repo.commits["dev"]
    for caller in callers:
        if caller.kind == "ensure":
            result = json.loads(caller.out)
            assert (result["commit"], result["version"], result["env_file"]) == (commit, "0.2.2", ws.env_file)
        else:
            assert "succeeded: flydsl 0.2.2 (built)" in caller.out, caller.out
    joined = sum(1 for c in callers if c.kind != "ensure" and c.start_json()["joined"] is True)
    assert not os.path.exists(ws.fail_marker)
    assert_one_tree(ws)
    assert os.path.isfile(ws.lock_file) and not os.path.islink(ws.lock_file)

    build_started = os.stat(os.path.join(ws.counter, "build.started")).st_mtime
    built = finished_tree_time(ws)
    ends = [c.ended for c in callers if c.ended is not None]
    last = max(ends)
    tail = last - built
    assert tail < HANG_GUARD_S, f"the last caller returned {tail:.1f} s after the build ended"
    record("load", scenario="16 blocking ensure + 16 start/wait, one request, cold root", callers=len(callers),
           builds=ws.count("build"), llvm_builds=ws.count("llvm"), failed=0, joined=joined,
           workers_launched=CALLERS - joined, launch_s=round(launched, 2), wall_s=round(last - started, 2),
           build_s=round(built - build_started, 2), last_after_build_s=round(tail, 2),
           first_build_after_launch_s=round(build_started - started, 2),
           lock_looks=watch.looks, lock_inodes=len(watch.inodes))


def _request(ws: Workspace, pin: str) -> Request:
    return load_settings({}, dict(ws.env, FLYDSL_PIN=pin)).request()


def test_mixed_requests_on_one_root_are_serialized_and_each_answered(ws: Workspace) -> None:
    """Pin A and pin B (B needs a rebuild of the same root) asked at once: every caller gets a tree of its own
    pin, and every run recorded as succeeded answered its own request."""
    pins = {"A": ws.repo.commits["dev"], "B": ws.repo.commits["v0.2.3"]}
    versions = {"A": "0.2.2", "B": "0.2.3"}
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # each pin's own tree (the version-only gate would let A's answer B)
    which: List[str] = []
    with all_succeed(ws) as (callers, _watch):
        started = time.time()
        for i in range(6):
            for name in ("A", "B"):
                env = dict(ws.env, FLYDSL_PIN=pins[name], FIXTURE_BUILD_SLEEP="0.1")
                callers.append(blocking(ws, env) if i < 4 else detached(env))
                which.append(name)
    for name, caller in zip(which, callers):
        if caller.kind == "ensure":
            result = json.loads(caller.out)
            assert (result["commit"], result["version"]) == (pins[name], versions[name]), (name, result)
        else:
            assert f"succeeded: flydsl {versions[name]} (built)" in caller.out, (name, caller.out)
    store = RunStore(ws.root)
    requests = {name: _request(ws, pin) for name, pin in pins.items()}
    runs = [store.read(n[:-5]) for n in os.listdir(store.folder) if n.endswith(".json")]
    succeeded = [r for r in runs if r and r.state == "succeeded"]
    for run in succeeded:
        name = next(n for n, req in requests.items() if req == run.request)
        assert run.result is not None and run.result["commit"] == pins[name], run
    twin = ws.env_twin()
    final = next(n for n, pin in pins.items() if twin["commit"] == pin)
    assert twin["request"] == requests[final].to_json()
    out = ws.source_and_import()
    assert out.returncode == 0 and out.stdout.splitlines()[-1] == versions[final], out.stderr
    builds = ws.count("build")
    assert 2 <= builds <= len(callers)
    assert set(counts(ws.counter, "build")) == set(pins.values())  # each build was of one of the two pins
    record("load", scenario="6 callers for pin A + 6 for pin B (4 ensure + 2 start/wait each), one root, at once",
           callers=len(callers), builds=builds, llvm_builds=ws.count("llvm"), failed=0,
           wall_s=round(max(c.ended or 0.0 for c in callers) - started, 2), recorded_runs=len(succeeded))


def test_a_lock_wait_is_bounded_and_names_the_running_holder(ws: Workspace) -> None:
    holder = ws.popen(FIXTURE_BUILD_SLEEP="30")  # it holds the lock until this test kills it
    try:
        wait_for_file(os.path.join(ws.counter, "build.started"), proc=holder)
        lock_inode = os.stat(ws.lock_file).st_ino
        with open(ws.lock_file + ".holder") as handle:
            info = json.load(handle)
        assert info["pid"] == holder.pid
        names = f"pid {holder.pid} on host {socket.gethostname()} since {info['started']}"
        for how in ("flag", "env", "zero"):
            began = time.monotonic()
            if how == "flag":
                out = ws.run("--lock-timeout", "0.5", FLYDSL_PIN="v0.2.3")
            elif how == "env":
                out = ws.run(FLYDSL_PIN="v0.2.3", FLYDSL_LOCK_TIMEOUT="0.5")
            else:
                out = ws.run(FLYDSL_PIN="v0.2.3", FLYDSL_LOCK_TIMEOUT="0")
            waited = time.monotonic() - began
            assert out.returncode == 7, out.stderr
            assert names in out.stderr and "could not take the build lock" in out.stderr
            assert waited < 0.5 + 15, f"a 0.5 s lock timeout took {waited:.1f} s"
            assert ws.marker()["exit_code"] == 7
            record("lock_timeout", via=how, timeout_s=0.0 if how == "zero" else 0.5, waited_s=round(waited, 2),
                   exit_code=out.returncode, names_holder=True)
        # A detached run for another request, with a lock timeout: `wait` reports the 7 and whom it waited for.
        data = json.loads(ws.run("start", FLYDSL_PIN="v0.2.3", FLYDSL_LOCK_TIMEOUT="0.5").stdout.splitlines()[-1])
        assert data["joined"] is False
        waited_out = ws.run("wait", "--timeout", "60", FLYDSL_PIN="v0.2.3", timeout=90)
        assert waited_out.returncode == 7, waited_out.stdout
        assert f"pid {holder.pid} on host {socket.gethostname()}" in waited_out.stdout
        record("lock_timeout", via="start+wait", timeout_s=0.5, exit_code=waited_out.returncode, names_holder=True)
        assert holder.poll() is None, "the holder ended during the test: the timeouts above proved nothing"
    finally:
        kill_group(holder.pid)
        holder.communicate(timeout=30)
    assert ws.count("build") == 1  # the timed-out callers never built
    # The holder died with the lock (kill -9): the lock file is the same, and a plain run resumes the build.
    assert os.stat(ws.lock_file).st_ino == lock_inode
    assert ws.run().returncode == 0
    assert os.stat(ws.lock_file).st_ino == lock_inode
    assert_one_tree(ws)


@pytest.mark.parametrize("command", ["ensure", "start", "clean"])
@pytest.mark.parametrize("target", ["file", "dangling", "folder"])
def test_a_lock_path_that_is_a_symlink_is_refused(ws: Workspace, tmp_path: "os.PathLike[str]", command: str,
                                                  target: str) -> None:
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    if target == "file":
        with open(elsewhere, "w") as handle:
            handle.write("not yours")
    elif target == "folder":
        os.makedirs(elsewhere)
    os.symlink(elsewhere, ws.lock_file)
    args = () if command == "ensure" else (command,)
    out = ws.run(*args)
    assert out.returncode == 64, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "FLYDSL_BUILD_LOCK=" in lines[0] and "symbolic link" in lines[0], lines
    assert os.path.islink(ws.lock_file) and os.readlink(ws.lock_file) == elsewhere
    if target == "file":
        assert open(elsewhere).read() == "not yours"
    elif target == "folder":
        assert os.listdir(elsewhere) == []
    else:
        assert not os.path.lexists(elsewhere)
    assert not os.path.exists(ws.root)
    record("bad_input_extra", setting="lock_file", value=f"symlink to a {target}", command=command,
           result=f"refused {out.returncode}")


def test_the_lock_file_survives_clean_and_kills(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    inode = os.stat(ws.lock_file).st_ino
    proc = ws.popen(FIXTURE_BUILD_SLEEP="5", FLYDSL_PIN="v0.2.3")
    wait_for_file(os.path.join(ws.counter, "build.started"), proc=proc)
    kill_group(proc.pid)
    proc.wait(timeout=30)
    assert os.stat(ws.lock_file).st_ino == inode
    assert ws.run("clean").returncode == 0
    assert os.stat(ws.lock_file).st_ino == inode
    assert ws.run().returncode == 0
    assert os.stat(ws.lock_file).st_ino == inode
