"""The build lease: hosts sharing one cache that miss the same pin at once pay one LLVM build and one
FlyDSL build; a dead holder is taken over, a failure is tried once more and then reported to every
waiter, a waiter's FLYDSL_LOCK_TIMEOUT ends it with exit 7 naming the holder, and no lease outlives its
run.  Each scenario runs against a shared folder and moto's S3 server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Dict, Iterator, List

import pytest

from ensure_flydsl.trees.backends import FolderStore, Store, open_store
from ensure_flydsl.trees.lease import LeaseRecord, Leases, exclusive_create, generation_path
from tests.helpers.fleet import SharedCache, at_least, builds, finish, fleet_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.ftp_server import FtpServer
from tests.helpers.s3_server import S3Server
from tests.helpers.scenario import Barrier, assert_one_tree, run_record_of, wait_for, wait_until
from tests.helpers.workspace import Workspace


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture(params=["folder", "s3"])
def shared(request: pytest.FixtureRequest, tmp_path: "os.PathLike[str]") -> SharedCache:
    if request.param == "s3":
        return SharedCache("s3", str(tmp_path), request.getfixturevalue("s3_server"))
    return SharedCache("folder", str(tmp_path))


def hosts(tmp_path: "os.PathLike[str]", repo: FixtureRepo, shared: SharedCache, names: str,
          **env: str) -> Dict[str, Workspace]:
    return {name: fleet_host(str(tmp_path), repo, name, shared, **env) for name in names}


def test_hosts_that_miss_at_once_pay_one_llvm_and_one_flydsl_build(tmp_path: "os.PathLike[str]",
                                                                  fixture_repo: FixtureRepo,
                                                                  shared: SharedCache) -> None:
    fleet = hosts(tmp_path, fixture_repo, shared, "abcd", FIXTURE_LLVM_SLEEP="0.5", FIXTURE_BUILD_SLEEP="0.75")
    procs = {name: ws.popen("--json") for name, ws in fleet.items()}
    ended = finish(procs)
    for name, (code, stderr) in ended.items():
        assert code == 0, f"{name}: {stderr}"
    counter = fleet["a"].counter
    assert builds(counter, "llvm") == 1 and builds(counter, "build") == 1
    assert open(os.path.join(counter, "build.count")).read().split() == [fixture_repo.commits["dev"]]
    hows = sorted(ws.env_twin()["how"] for ws in fleet.values())
    assert hows == ["built", "cached", "cached", "cached"]
    for ws in fleet.values():
        assert ws.env_twin()["commit"] == fixture_repo.commits["dev"]
        assert_one_tree(ws)
    waited = [said for _code, said in ended.values() if "waiting for " in said]
    assert waited  # (a host slowed down by the machine may find an entry published before it looked)
    assert any("building the FlyDSL tree for " + fixture_repo.commits["dev"][:8] in s or
               "building MLIR for LLVM " in s for s in waited)
    assert shared.files("leases") == []  # no lease (nor probe object) outlives the runs


def test_a_holder_killed_with_kill_9_is_taken_over(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                   shared: SharedCache) -> None:
    fleet = hosts(tmp_path, fixture_repo, shared, "ab", FLYDSL_LEASE_TTL="3")
    a = fleet["a"].popen(FIXTURE_BUILD_SLEEP="30")
    holder = shared.wait_lease("tree", host="a")
    b = fleet["b"].popen()
    # a beats while it builds (every TTL/4): its count may pass 1 between two looks at a loaded store
    shared.wait_lease("tree", host="a", beat=at_least(1))
    wait_for(os.path.join(fleet["a"].counter, "build.started"))
    os.kill(holder["pid"], signal.SIGKILL)
    assert a.wait(timeout=30) == -signal.SIGKILL
    out, stderr = b.communicate(timeout=120)
    stderr += out
    assert b.returncode == 0, stderr
    assert f"the build lease of a (run {holder['run_id']}) on the FlyDSL tree" in stderr and "is dead" in stderr
    assert fleet["b"].env_twin()["how"] == "built"
    assert builds(fleet["a"].counter, "build") == 2  # a's, killed, and b's
    assert builds(fleet["a"].counter, "llvm") == 1  # b fetched the MLIR a had published
    assert_one_tree(fleet["b"])
    assert shared.files("leases") == []


def waits_for(ws: Workspace, pid: int, host: str) -> None:
    """Until the run ``pid`` of ``ws`` waits for ``host``'s build lease (its run record says so)."""
    def waiting() -> bool:
        followed = run_record_of(ws, pid).get("waiting")
        return isinstance(followed, dict) and followed.get("host") == host

    wait_until(f"{ws.base}: run {pid} waits for {host}'s build lease", waiting, timeout=60)


def test_two_waiters_racing_for_a_dead_lease_give_one_builder(tmp_path: "os.PathLike[str]",
                                                             fixture_repo: FixtureRepo, shared: SharedCache) -> None:
    fleet = hosts(tmp_path, fixture_repo, shared, "abc", FLYDSL_LEASE_TTL="2")
    counter = fleet["a"].counter
    held = Barrier(str(tmp_path), "a-llvm")  # a holds the MLIR lease, building, until it is killed
    a = fleet["a"].popen(FIXTURE_LLVM_HOOK=held.hook)
    try:
        holder = shared.wait_lease("mlir", host="a")
        held.wait_reached()
        # Each build says which host made it; b and c both wait for a's lease before it dies, so they race.
        # The tree's build holds until the other host waits for its lease.
        tree = Barrier(str(tmp_path), "tree")
        said = {step: f'echo "$FLYDSL_HOST_ID" >> "{counter}/{step}.by"' for step in ("llvm", "build")}
        waiters = {name: fleet[name].popen(FIXTURE_LLVM_HOOK=said["llvm"],
                                           FIXTURE_BUILD_HOOK=said["build"] + "; " + tree.hook) for name in "bc"}
        for name in "bc":
            waits_for(fleet[name], waiters[name].pid, "a")
        os.kill(holder["pid"], signal.SIGKILL)
        assert a.wait(timeout=30) == -signal.SIGKILL
        tree.wait_reached()
        (tree_builder,) = open(os.path.join(counter, "build.by")).read().split()
        fetcher = next(n for n in "bc" if n != tree_builder)
        waits_for(fleet[fetcher], waiters[fetcher].pid, tree_builder)
        tree.release()
        ended = finish(waiters)
    finally:
        held.release()
    for name, (code, stderr) in ended.items():
        assert code == 0, f"{name}: {stderr}"
    assert builds(counter, "llvm") == 2  # a's, killed, and the taker's
    assert builds(counter, "build") == 1
    took = [name for name, (_c, said_) in ended.items() if "took the build lease on MLIR" in said_]
    assert len(took) == 1, ended
    taker, other = took[0], next(n for n in "bc" if n != took[0])
    assert f"the build lease of a (run {holder['run_id']}) on MLIR" in ended[taker][1]
    assert "is dead" in ended[taker][1] and "taking it over" in ended[taker][1]
    assert f"waiting for a (run {holder['run_id']}) building MLIR" in ended[other][1]
    assert open(os.path.join(counter, "llvm.by")).read().split() == [taker]
    assert f"waiting for {tree_builder} (run " in ended[fetcher][1]
    assert fleet[tree_builder].env_twin()["how"] == "built" and fleet[fetcher].env_twin()["how"] == "cached"
    assert shared.files("leases") == []


def test_a_recorded_failure_is_tried_once_more_then_reported_to_every_waiter(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, shared: SharedCache) -> None:
    failing = Barrier(os.path.join(str(tmp_path), "barrier"), "fail")  # a fails once b and c wait for it
    fleet = hosts(tmp_path, fixture_repo, shared, "abc", FIXTURE_BUILD_HOOK=f"{failing.hook}; exit 1")
    a = fleet["a"].popen()
    shared.wait_lease("tree", host="a")
    others = {name: fleet[name].popen() for name in "bc"}
    for name, proc in others.items():
        waits_for(fleet[name], proc.pid, "a")
    failing.release()  # the retry's build fails at once too
    a_out, a_err = a.communicate(timeout=120)
    a_err += a_out
    assert a.returncode == 5, a_err
    ended = finish(others)
    assert sorted(code for code, _ in ended.values()) == [5, 5]
    assert builds(fleet["a"].counter, "build") == 2  # a's and one retry, never a third
    retried = [n for n, (_c, err) in ended.items() if "trying once here" in err and "took the build lease on the"
               in err]
    assert len(retried) == 1, ended
    gave_up = next(n for n in "bc" if n not in retried)
    stderr = ended[gave_up][1]
    assert f"failed twice in the fleet, last on {retried[0]} (run " in stderr
    assert "stage build, exit 5" in stderr
    marker = fleet[gave_up].marker()
    assert marker["exit_code"] == 5 and marker["stage"] == "build"
    assert "failed twice in the fleet" in str(marker["reason"])
    for name in (retried[0], "a"):
        own = fleet[name].marker()
        assert own["exit_code"] == 5 and own["stage"] == "build", own
    # What stays is the last failure record (no lease: nobody holds it), news for TTL seconds.
    left = shared.leases("tree")
    assert [r["state"] for r in left] == ["failed"] and left[0]["host"] == retried[0]


def test_a_failure_on_one_host_does_not_stop_the_fleet(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    shared = SharedCache("folder", str(tmp_path))
    fleet = hosts(tmp_path, fixture_repo, shared, "abc")
    a = fleet["a"].popen(FIXTURE_BUILD_HOOK="sleep 2; exit 1")  # say, the OOM killer on host a
    shared.wait_lease("tree", host="a")
    ended = finish({name: fleet[name].popen() for name in "bc"})
    a.communicate(timeout=60)
    assert a.returncode == 5
    assert [code for code, _ in ended.values()] == [0, 0], ended
    assert builds(fleet["a"].counter, "build") == 2
    assert sorted(fleet[n].env_twin()["how"] for n in "bc") == ["built", "cached"]
    assert shared.files("leases") == []


def test_a_waiters_lock_timeout_is_exit_7_naming_the_holder(tmp_path: "os.PathLike[str]",
                                                           fixture_repo: FixtureRepo, shared: SharedCache) -> None:
    fleet = hosts(tmp_path, fixture_repo, shared, "ab")
    building = Barrier(fleet["a"].counter, "building")  # a builds, holding the lease, until it is interrupted
    a = fleet["a"].popen(FIXTURE_BUILD_HOOK=building.hook)
    holder = shared.wait_lease("tree", host="a")
    out = fleet["b"].run(FLYDSL_LOCK_TIMEOUT="1")
    assert out.returncode == 7, out.stderr
    assert f"for a (run {holder['run_id']}) building the FlyDSL tree" in out.stderr
    assert "FLYDSL_LOCK_TIMEOUT=1 s ran out" in out.stderr
    marker = fleet["b"].marker()
    assert marker["exit_code"] == 7 and marker["stage"] == "lease" and holder["run_id"] in str(marker["reason"])
    assert builds(fleet["a"].counter, "build") == 1  # b never built
    b = fleet["b"].popen()
    deadline = time.monotonic() + 60
    while not isinstance(json.loads(fleet["b"].run("status", "--json").stdout).get("waiting_for"), dict):
        assert time.monotonic() < deadline and b.poll() is None
        time.sleep(0.1)
    os.killpg(b.pid, signal.SIGINT)  # Ctrl-C of a waiter: it held nothing, the holder builds on
    b.communicate(timeout=60)
    assert b.returncode == 130
    assert [(r["host"], r["state"]) for r in shared.leases("tree")] == [("a", "building")]
    os.killpg(a.pid, signal.SIGINT)  # Ctrl-C of the holder releases its lease at once
    a.communicate(timeout=60)
    assert a.returncode == 130
    assert shared.leases("tree") == []


def test_status_and_wait_show_whom_a_waiter_waits_for(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    shared = SharedCache("folder", str(tmp_path))
    fleet = hosts(tmp_path, fixture_repo, shared, "ab", FLYDSL_LEASE_TTL="2")
    built = Barrier(fleet["a"].counter, "built")  # a's build holds, its [3/3] printed, until b has been seen
    a = fleet["a"].popen(FIXTURE_BUILD_HOOK=built.hook)
    holder = shared.wait_lease("tree", host="a")
    b = fleet["b"]
    assert b.run("start").returncode == 0
    deadline = time.monotonic() + 60
    while True:
        data = json.loads(b.run("status", "--json").stdout)
        if isinstance(data.get("waiting_for"), dict) and data["waiting_for"].get("percent") is not None:
            break
        assert data["state"] == "running" and time.monotonic() < deadline, data
        time.sleep(0.1)
    waiting = data["waiting_for"]
    assert waiting["host"] == "a" and waiting["run_id"] == holder["run_id"]
    assert data["percent"] == waiting["percent"]  # the holder's figures are the waiter's
    assert waiting["text"].startswith(f"a (run {holder['run_id']}) building the FlyDSL tree for ")
    text = b.run("status").stdout
    assert f"waiting: for a (run {holder['run_id']}) building the FlyDSL tree" in text
    follower = subprocess.Popen(b.cmd("wait", "--heartbeat", "0.2"), env=b.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    assert follower.stdout is not None
    said = []
    for line in follower.stdout:  # the waiter's wait says whom it waits for, then a finishes
        said.append(line)
        if f"waiting for a (run {holder['run_id']}) building" in line:
            built.release()
    assert follower.wait(timeout=60) == 0, "".join(said)
    assert built.released(), "".join(said)
    assert a.wait(timeout=60) == 0
    assert b.env_twin()["how"] == "cached"
    assert builds(b.counter, "build") == 1


@pytest.fixture
def ftp() -> Iterator[FtpServer]:
    server = FtpServer().start()
    yield server
    server.stop()


def test_a_store_that_ignores_exclusive_create_is_detected(tmp_path: "os.PathLike[str]", ftp: FtpServer) -> None:
    honest = FolderStore(os.path.join(str(tmp_path), "honest"))
    assert exclusive_create(honest) == (True, "")
    sloppy = open_store(ftp.url("probe-cache"))  # fsspec's FTP: "xb" is a plain STOR
    honoured, why = exclusive_create(sloppy)
    assert not honoured and "a second create of one object succeeded" in why
    for store in (honest, sloppy):  # the probe leaves nothing behind
        assert store.list_files("leases") == []


def test_hosts_making_one_folder_at_once_on_such_a_store_all_go_on(ftp: FtpServer) -> None:
    """Hosts that write into one new folder at the same moment: on FTP the later MKD fails ("550 exists"),
    which is neither "the object exists" nor an unreachable cache (it was read as the latter, and the host
    went on without the cache for the rest of its run)."""
    rounds, width = 6, 6
    stores = [open_store(ftp.url("race-cache")) for _ in range(width)]
    errors: List[str] = []

    def write(store: Store, folder: str, gate: threading.Barrier) -> None:
        gate.wait()
        try:
            assert store.create_exclusive(f"{folder}/{uuid.uuid4().hex}.json", b"{}")
            store.put_bytes(f"{folder}/more/{uuid.uuid4().hex}.json", b"{}")
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            errors.append(f"{type(exc).__name__}: {exc}")

    for turn in range(rounds):
        gate = threading.Barrier(width)
        threads = [threading.Thread(target=write, args=(store, f"leases/r{turn}", gate)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert errors == []
    assert all(getattr(store, "down", None) is None for store in stores)
    for turn in range(rounds):
        assert len(os.listdir(os.path.join(ftp.home, "race-cache", "leases", f"r{turn}"))) == width + 1


def test_on_such_a_store_each_host_builds_without_a_lease_as_before(tmp_path: "os.PathLike[str]",
                                                                   fixture_repo: FixtureRepo, ftp: FtpServer) -> None:
    shared = SharedCache("folder", str(tmp_path))
    shared.url = ftp.url("fleet-cache")
    # Each build waits (up to 60 s) until both hosts have reached it, so neither publishes before the other
    # has missed the cache: a host the machine slowed down would otherwise fetch instead of building.
    barrier = os.path.join(str(tmp_path), "barrier")
    os.makedirs(barrier)

    def meet(step: str) -> str:
        return (f'touch "{barrier}/{step}.$$"; n=0; while [ "$(ls "{barrier}" | grep -c "^{step}\\.")" -lt 2 ] '
                f'&& [ $n -lt 600 ]; do sleep 0.1; n=$((n+1)); done')

    fleet = hosts(tmp_path, fixture_repo, shared, "abc")
    for name in "ab":
        fleet[name].env.update(FIXTURE_LLVM_HOOK=meet("llvm"), FIXTURE_BUILD_HOOK=meet("build"))
    ended = finish({name: fleet[name].popen() for name in "ab"})
    for name, (code, said) in ended.items():
        assert code == 0, f"{name}: {said}"
        assert said.count("does not honour exclusive create (a second create of one object succeeded") == 1
        assert "so hosts sharing it cannot take turns at a build" in said
        assert "waiting for" not in said and "took the build lease" not in said
    assert builds(fleet["a"].counter, "build") == 2 and builds(fleet["a"].counter, "llvm") == 2
    later = fleet["c"].run()  # the cache itself works on it: the third host fetches
    assert later.returncode == 0, later.stderr
    assert fleet["c"].env_twin()["how"] == "cached"
    assert not os.path.exists(os.path.join(ftp.home, "fleet-cache", "leases")) or not any(
        files for _d, _s, files in os.walk(os.path.join(ftp.home, "fleet-cache", "leases")))


def test_what_a_killed_writer_left_goes_with_its_generation(tmp_path: "os.PathLike[str]") -> None:
    """A holder killed with kill -9 in the middle of a heartbeat leaves its staged copy
    (".0000000001.json.<random>.tmp"): it goes when its generation goes, as an old staged create does; a
    fresh one may be a live writer's and stays.  (CI saw one outlive the runs of the kill -9 takeover test.)"""
    store = FolderStore(os.path.join(str(tmp_path), "cache"))
    leases, key = Leases(store, 60.0), "cd" * 32
    folder = os.path.join(store.root, "leases", "tree", key)

    def record(generation: int) -> LeaseRecord:
        return LeaseRecord(kind="tree", key=key, generation=generation, host="h", run_id=f"run-{generation}",
                           pid=os.getpid(), started=time.time(), what="x")

    first = leases.take(record(1), lambda: ("build", 1.0, None))
    assert first is not None
    planted = {".0000000001.json.k9x2a.tmp": 0.0, "0000000001.json.5f3e.tmp": 0.0,  # a folder's, fsspec's
               ".create.old1.tmp": 3600.0, ".create.new1.tmp": 0.0, ".0000000002.json.live.tmp": 0.0}
    for name, age in planted.items():
        path = os.path.join(folder, name)
        with open(path, "wb") as handle:
            handle.write(b"{half")
        os.utime(path, (time.time() - age, time.time() - age))
    taker = leases.take(record(2), lambda: ("build", 1.0, None))  # gen 1 is past: it and its leftovers go
    assert taker is not None
    assert sorted(os.listdir(folder)) == [".0000000002.json.live.tmp", ".create.new1.tmp", "0000000002.json"]
    taker.release(published=True)
    assert sorted(os.listdir(folder)) == [".create.new1.tmp"]  # what may still be a live create's
    first.release(published=False)  # (its heartbeat thread; its generation is gone already)
    assert sorted(os.listdir(folder)) == [".create.new1.tmp"]


def test_lease_objects_generations_and_unreadable_records(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(os.path.join(str(tmp_path), "cache"))
    leases, key = Leases(store, 60.0), "ab" * 32

    def record(generation: int) -> LeaseRecord:
        return LeaseRecord(kind="tree", key=key, generation=generation, host="h", run_id=f"run-{generation}",
                           pid=os.getpid(), started=time.time(), what="x")

    held = leases.take(record(1), lambda: ("build", 50.0, 10.0))
    assert held is not None
    assert leases.take(record(1), lambda: (None, None, None)) is None  # one generation, one taker
    first = leases.newest("tree", key)
    assert first is not None and (first.step, first.percent, first.beat) == ("build", 50.0, 0)
    held.beat()
    again = leases.newest("tree", key)
    assert again is not None and again.beat == 1 and again.raw != first.raw  # what a waiter watches change
    # A taker acting on an older listing (a generation newer than its own exists) yields at once.
    assert store.create_exclusive(generation_path("tree", key, 3), b"\x00 torn or foreign")
    assert leases.take(record(2), lambda: (None, None, None)) is None
    assert leases.generations("tree", key) == [1, 3]
    unknown = leases.newest("tree", key)
    assert unknown is not None and unknown.generation == 3 and unknown.state == "building"
    assert unknown.host == "an unknown host"  # dies like any lease once its bytes stop changing
    held.fail("build", 5, "boom")
    data = json.loads(open(os.path.join(store.root, *generation_path("tree", key, 1).split("/"))).read())
    assert data["state"] == "failed" and data["failure"] == {"stage": "build", "exit_code": 5, "reason": "boom"}
    held.release(published=True)  # ended already: nothing more happens
    assert leases.generations("tree", key) == [1, 3]
    # A holder whose beats came late by a TTL was taken over: it stops beating, resurrects nothing.
    late = leases.take(record(4), lambda: ("build", 1.0, None))
    assert late is not None and leases.generations("tree", key) == [4]
    assert store.create_exclusive(generation_path("tree", key, 5), record(5).to_bytes())
    store.remove(generation_path("tree", key, 4))  # the new holder cleared the generations below its own
    late.beat()
    assert late.lost and leases.generations("tree", key) == [5]
    late.fail("build", 5, "late")  # the key is the new holder's: no failure record of ours
    assert leases.generations("tree", key) == [5]


@pytest.mark.parametrize("value", ["0", "-5", "abc", "nan", "inf", "1e-300", "0.5"])
def test_a_bad_lease_ttl_is_bad_input(ws: Workspace, value: str) -> None:
    out = ws.run(FLYDSL_LEASE_TTL=value)
    assert out.returncode == 64
    assert f"FLYDSL_LEASE_TTL={value!r} is not allowed: seconds a build lease lives" in out.stderr
    flag = ws.run(f"--lease-ttl={value}")
    assert flag.returncode == 64 and f"--lease-ttl={value!r}" in flag.stderr
    assert not os.path.exists(ws.root)


def test_the_lease_needs_no_extra_for_a_folder() -> None:
    out = subprocess.run([sys.executable, "-c", "import ensure_flydsl.trees.lease, sys; "
                          "print('fsspec' in sys.modules)"], stdout=subprocess.PIPE, text=True, check=True)
    assert out.stdout.strip() == "False"
