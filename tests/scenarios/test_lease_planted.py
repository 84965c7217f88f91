"""What another party may leave in a shared cache's lease folders (anyone who can write to the cache can):

- a failure record whose exit code or stage no build step has (exit 0, 75, 1, 130 or 9; "lease" with 7;
  "build" with 4's code) is the lease of an unknown holder, taken over after a TTL: its code is never the
  run's (0 with no env file, 75 that sends a README-following agent back to `wait` for ever);
- anything at a generation's name (a folder, a link to one, a dangling link) is that generation: waited out
  for a TTL like an unknown holder's lease, then the generation after it is taken, once, never tried again
  four times a second with the root's lock held; on S3 a "folder" (objects under ``NAME/``) stands beside
  ``NAME``, whose create succeeds;
- FLYDSL_LOCK_TIMEOUT ends the wait, whatever it waits for (exit 7 and its message);
- a generation whose create failed while the store lists nothing at its name is passed over (a store whose
  listing misses what it holds), and such a store's lease is given up after two tries;
- the longest FLYDSL_HOST_ID the settings take is one a lease record carries.

Each planted record starts from a real one: host "a" fails its LLVM build once, which leaves generation 1 of
the real MLIR key; the test rewrites it."""

from __future__ import annotations

import io
import json
import os
import signal
import threading
import time
from typing import Callable, Dict, Iterator, List, Tuple

import pytest

from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.trees.backends import CacheError, FolderStore, StoredFile, open_store
from ensure_flydsl.trees.lease import LeaseRecord, Leases, generation_path
from ensure_flydsl.trees.remote import Cache, manifest_path
from ensure_flydsl.ways.cache.fleet import Turn, take_turn
from ensure_flydsl.ways.context import Run
from tests.helpers.fleet import SharedCache, builds, fleet_host
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.s3_server import S3Server
from tests.helpers.scenario import Barrier
from tests.helpers.workspace import Workspace

TAKE_OVER = "taking it over"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


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


def plant_dead_holder(shared: SharedCache, record: Dict[str, object]) -> None:
    """Generation 1 as a holder that died an hour ago wrote it (a TTL of 1 s): its bytes never change again."""
    old = time.time() - 3600
    dead = dict(record, host="ghost", run_id="20260101-000000-dead00", pid=1, state="building", failure=None,
                ended=None, failures_before=0, ttl=1.0, started=old, heartbeat=old)
    shared.put(generation(record, 1), json.dumps(dead).encode())


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
# Which records are believed is a pure rule: each of FAILURE_RECORDS is read by tests/unit/test_lease_rules.py.
# Here a waiter over one of each outcome: an exit 0 "failure" built over, a build step's failure that ends it.
@pytest.mark.parametrize("stage,code,expect", [("llvm", 0, None), ("llvm", 4, 4)])
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


# -- something at a generation's name ---------------------------------------------------------------------------
def _folder(path: str, tmp: str) -> None:
    os.mkdir(path)
    open(os.path.join(path, "x"), "w").close()


def _link_to_folder(path: str, tmp: str) -> None:
    os.makedirs(os.path.join(tmp, "elsewhere"))
    os.symlink(os.path.join(tmp, "elsewhere"), path)


BLOCKERS: Dict[str, Callable[[str, str], None]] = {
    "folder": _folder,
    "empty folder": lambda path, tmp: os.mkdir(path),
    "link to a folder": _link_to_folder,
    "dangling link": lambda path, tmp: os.symlink(os.path.join(tmp, "nowhere"), path),
}
SAID = {"folder": "is a folder, not a regular file", "empty folder": "is a folder, not a regular file",
        "link to a folder": "is a symbolic link", "dangling link": "is a symbolic link"}


@pytest.mark.parametrize("blocker", sorted(BLOCKERS))
def test_something_at_the_next_generations_name_is_taken_over_once(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, blocker: str) -> None:
    """A dead holder's record, and at the next generation's name something that is no record: the run waits
    it out for a TTL (it counts as that generation, an unknown holder's), takes the generation after it and
    builds."""
    tmp = str(tmp_path)
    shared = SharedCache("folder", tmp)
    record = first_record(tmp, fixture_repo, shared)
    plant_dead_holder(shared, record)
    path = os.path.join(shared.url, *generation(record, 2).split("/"))
    BLOCKERS[blocker](path, tmp)
    b = fleet_host(tmp, fixture_repo, "b", shared, FLYDSL_LEASE_TTL="2")
    llvm_before = builds(b.counter, "llvm")
    got, said = bounded_run(b)
    assert got == 0 and b.env_twin()["how"] == "built", said
    assert f"{generation(record, 2)} in {shared.url} is not one this tool writes (" in said and SAID[blocker] in said
    assert said.count(TAKE_OVER) == 1 and open(b.log).read().count(TAKE_OVER) == 1
    assert "took the build lease on MLIR for LLVM " in said and "(generation 3)" in said
    assert builds(b.counter, "llvm") == llvm_before + 1
    # A folder stays (the tool removes none, and follows no link); a dangling link goes with the generations
    # below the taker's, as a FIFO or a torn record there would (unlinked, never followed).
    assert os.path.lexists(path) == (blocker != "dangling link")
    assert all(p.startswith(generation(record, 2)) for p in shared.files("leases"))  # only what was planted


def test_lock_timeout_ends_the_wait_for_what_stands_at_a_generations_name(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """With the reader's TTL long, the folder at generation 2 is an unknown holder it would wait a minute
    for: FLYDSL_LOCK_TIMEOUT=1 ends that wait (it used to end nothing: the run took generation 1 over, four
    times a second, for ever)."""
    tmp = str(tmp_path)
    shared = SharedCache("folder", tmp)
    record = first_record(tmp, fixture_repo, shared)
    plant_dead_holder(shared, record)
    os.mkdir(os.path.join(shared.url, *generation(record, 2).split("/")))
    b = fleet_host(tmp, fixture_repo, "b", shared, FLYDSL_LEASE_TTL="60", FLYDSL_LOCK_TIMEOUT="1")
    llvm_before = builds(b.counter, "llvm")
    got, said = bounded_run(b)
    assert got == 7, said
    assert "for an unknown host (run ?) building the mlir " in said and "FLYDSL_LOCK_TIMEOUT=1 s ran out" in said
    assert TAKE_OVER not in said
    marker = b.marker()
    assert marker["exit_code"] == 7 and marker["stage"] == "lease"
    assert "FLYDSL_LOCK_TIMEOUT=1 s ran out" in str(marker["reason"])
    assert builds(b.counter, "llvm") == llvm_before


def test_lock_timeout_ends_the_wait_for_a_live_holder(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    tmp = str(tmp_path)
    shared = SharedCache("folder", tmp)
    held = Barrier(tmp, "a-llvm")
    a = fleet_host(tmp, fixture_repo, "a", shared, FLYDSL_LEASE_TTL="2")
    proc = a.popen(FIXTURE_LLVM_HOOK=held.hook)
    try:
        holder = shared.wait_lease("mlir", host="a")
        held.wait_reached()
        b = fleet_host(tmp, fixture_repo, "b", shared, FLYDSL_LOCK_TIMEOUT="1")
        got, said = bounded_run(b)
        assert got == 7, said
        assert f"for a (run {holder['run_id']}) building MLIR for LLVM " in said
        assert "FLYDSL_LOCK_TIMEOUT=1 s ran out" in said and TAKE_OVER not in said
        assert b.marker()["exit_code"] == 7 and b.marker()["stage"] == "lease"
    finally:
        held.release()
    proc.communicate(timeout=120)
    assert proc.returncode == 0  # the holder built on, unaffected


def test_on_s3_a_folder_at_a_generations_name_stands_beside_it(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, s3_server: S3Server) -> None:
    """On S3 a "folder" is a prefix: ``0000000002.json/x`` stands beside the object ``0000000002.json``, whose
    exclusive create succeeds.  So there it is no generation: the dead holder's lease is taken over with
    generation 2 at once, and the planted object stays."""
    tmp = str(tmp_path)
    shared = SharedCache("s3", tmp, s3_server)
    record = first_record(tmp, fixture_repo, shared)
    plant_dead_holder(shared, record)
    planted = generation(record, 2) + "/x"
    shared.put(planted, b"planted")
    b = fleet_host(tmp, fixture_repo, "b", shared, FLYDSL_LEASE_TTL="2")
    got, said = bounded_run(b)
    assert got == 0 and b.env_twin()["how"] == "built", said
    assert said.count(TAKE_OVER) == 1 and "the build lease of ghost (run 20260101-000000-dead00)" in said
    assert "took the build lease on MLIR for LLVM " in said and "(generation 2)" in said
    assert shared.files("leases") == [planted]


def test_a_generation_is_there_exactly_when_its_create_fails(tmp_path: "os.PathLike[str]", s3_server: S3Server,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What counts as a generation's presence, per store: whatever a create of its name collides with."""
    tmp = str(tmp_path)
    key = "ef" * 32
    folder_store = FolderStore(os.path.join(tmp, "cache"))
    top = os.path.join(folder_store.root, "leases", "tree", key)
    os.makedirs(top)
    planted: Dict[int, Callable[[str], None]] = {
        2: lambda p: open(p, "w").close(), 3: os.mkdir, 4: lambda p: _link_to_folder(p, tmp),
        5: lambda p: os.symlink(os.path.join(tmp, "nowhere"), p), 6: os.mkfifo,
        7: lambda p: _folder(os.path.join(p + ".d"), tmp),  # a folder named otherwise: no generation
    }
    for n, make in planted.items():
        make(os.path.join(top, f"{n:010d}.json"))
    shared = SharedCache("s3", tmp, s3_server)
    for name, value in shared.env.items():
        monkeypatch.setenv(name, value)
    s3_store = open_store(shared.url)
    shared.put(generation_path("tree", key, 2), b"{}")
    shared.put(generation_path("tree", key, 3) + "/x", b"a prefix")
    for store, present in ((folder_store, [2, 3, 4, 5, 6]), (s3_store, [2])):
        leases = Leases(store, 60.0)
        assert leases.generations("tree", key) == present, store.location
        for n in range(2, 8):
            created = store.create_exclusive(generation_path("tree", key, n), b"mine")
            assert created == (n not in present), (store.location, n)
        newest = leases.newest("tree", key)
        assert newest is not None and newest.generation == 7 and newest.invalid is not None  # "mine": no record


# -- a store whose listing misses what it holds ------------------------------------------------------------------
class _Unlisted(FolderStore):
    """A real folder store whose listings leave out some generations' names (as a store whose listing lags
    its writes does); ``broken`` makes every call fail (so a spinning waiter ends once the test is over)."""

    def __init__(self, root: str, hidden: Callable[[str], bool]) -> None:
        super().__init__(root)
        self.hidden = hidden
        self.broken = False

    def _check(self) -> None:
        if self.broken:
            raise CacheError("the test is over")

    def list_names(self, rel_dir: str) -> List[str]:
        self._check()
        return [n for n in super().list_names(rel_dir) if not self.hidden(n)]

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        self._check()
        return [f for f in super().list_files(rel_dir) if not self.hidden(f.path.rsplit("/", 1)[-1])]


def turn_in(store: _Unlisted, key: str, limit_s: float = 30.0) -> Tuple["Turn[None]", str]:
    """take_turn of a run over ``store`` (TTL 0.5 s), in a thread that must end within ``limit_s``."""
    said = io.StringIO()
    run = Run(Settings(root=os.path.join(store.root, "..", "FlyDSL"), lease_ttl=0.5), Reporter(said),
              {"FLYDSL_HOST_ID": "t"})
    ended: List["Turn[None]"] = []
    thread = threading.Thread(target=lambda: ended.append(
        take_turn(run, Cache(store), "mlir", key, "MLIR for LLVM x", lambda: None)), daemon=True)
    thread.start()
    thread.join(limit_s)
    store.broken = True  # a waiter still spinning ends now
    thread.join(30)
    assert ended, f"no turn within {limit_s} s:\n{said.getvalue()[-3000:]}"
    return ended[0], said.getvalue()


def test_a_take_whose_create_fails_with_nothing_listed_moves_on(tmp_path: "os.PathLike[str]") -> None:
    key = "cd" * 32
    hidden = f"{2:010d}.json"
    store = _Unlisted(os.path.join(str(tmp_path), "cache"), lambda name: name == hidden)
    dead = LeaseRecord(kind="mlir", key=key, generation=1, host="ghost", run_id="r-dead", pid=1,
                       started=time.time() - 3600, what="x", ttl=0.2)
    assert store.create_exclusive(generation_path("mlir", key, 1), dead.to_bytes())
    assert store.create_exclusive(generation_path("mlir", key, 2), b"there, but never listed")
    turn, said = turn_in(store, key)
    held = turn.held
    try:
        assert held is not None and held.record.generation == 3, said
        assert said.count(TAKE_OVER) == 2  # generation 1 is dead: its take (of 2) failed, then 3 was taken
        assert f"{generation_path('mlir', key, 2)} in {store.location} could not be created a moment ago" in said
    finally:
        if held is not None:
            held.release(published=False)


def test_a_store_that_never_lists_what_it_holds_is_given_up(tmp_path: "os.PathLike[str]") -> None:
    key = "cd" * 32
    store = _Unlisted(os.path.join(str(tmp_path), "cache"), lambda name: name.endswith(".json"))
    for n in range(1, 10):
        assert store.create_exclusive(generation_path("mlir", key, n), b"there, but never listed")
    turn, said = turn_in(store, key)
    assert turn.held is None and turn.fetched is None
    assert said.count("could not be created a moment ago") == 2
    assert "the build lease cannot be used now" in said and "building without it" in said


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


class _PublishedAsTaken(FolderStore):
    """A real folder store where another host publishes the key's entry at the moment this run's take of its
    lease lands (its create of the generation writes the entry's manifest too)."""

    def __init__(self, root: str, lease: str, manifest: str) -> None:
        super().__init__(root)
        self.lease, self.manifest = lease, manifest

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        created = super().create_exclusive(rel, data)
        if created and rel == self.lease:
            self.put_bytes(self.manifest, b"{}")
        return created


def test_a_lease_given_back_because_the_key_was_published_is_not_said_taken(tmp_path: "os.PathLike[str]") -> None:
    """A waiter whose take lands as another host publishes gives the lease back and fetches: it never says
    that it took the build lease (two waiters of a dead lease both said so, one of them wrongly)."""
    key = "cd" * 32
    store = _PublishedAsTaken(os.path.join(str(tmp_path), "cache"), generation_path("mlir", key, 1),
                              manifest_path("mlir", key))
    said = io.StringIO()
    run = Run(Settings(root=os.path.join(store.root, "..", "FlyDSL"), lease_ttl=0.5), Reporter(said),
              {"FLYDSL_HOST_ID": "t"})
    turn = take_turn(run, Cache(store), "mlir", key, "MLIR for LLVM x", lambda: "fetched")
    assert turn.held is None and turn.fetched == "fetched", said.getvalue()
    assert "took the build lease" not in said.getvalue(), said.getvalue()
