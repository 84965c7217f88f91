"""The shared cache is somebody else's data: a bad lease record, a failure record from a fast clock, a
missing bucket, an unreachable endpoint, a FIFO planted as a blob, links planted under a folder cache's
root and a cache this user may only read are each reported and built around; none ends a run with exit 70,
hangs it, or makes it write outside the cache (issue 19, items 4-8, 13 and 15's lease parts)."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from typing import Dict, Iterator, List, Tuple

import pytest

from ensure_flydsl.trees.backends import CacheError, FolderStore
from ensure_flydsl.trees.lease import LeaseRecord, Leases, generation_path
from tests.helpers.as_nobody import Nobody, unavailable
from tests.helpers.closing_server import ClosingServer, closed_port
from tests.helpers.fleet import FAILED, SharedCache, bad_record, builds, fleet_host, lease_record
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.reliability import listing
from tests.helpers.s3_server import S3Server


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, fixture_repo: FixtureRepo) -> Tuple[str, str]:
    """A folder cache that holds the MLIR and the tree of the fixture's "dev" pin (published by one run),
    and the tree's key."""
    tmp = str(tmp_path_factory.mktemp("seeded"))
    shared = SharedCache("folder", tmp)
    out = fleet_host(tmp, fixture_repo, "seed", shared).run()
    assert out.returncode == 0, out.stderr
    (manifest,) = glob.glob(os.path.join(shared.url, "entries", "tree", "*.json"))
    return shared.url, os.path.basename(manifest)[: -len(".json")]


def own_copy(seeded: Tuple[str, str], tmp: str, *, keep_tree: bool = False) -> Tuple[SharedCache, str]:
    """This test's copy of the seeded cache; without the tree entry unless ``keep_tree`` (a miss)."""
    source, key = seeded
    shared = SharedCache("folder", tmp)
    shutil.copytree(source, shared.url, symlinks=True)
    if not keep_tree:
        os.unlink(os.path.join(shared.url, "entries", "tree", key + ".json"))
    return shared, key


def plant(shared: SharedCache, key: str, record: object, generation: int = 1) -> str:
    path = os.path.join(shared.url, "leases", "tree", key, f"{generation:010d}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(record if isinstance(record, str) else json.dumps(record))
    return path


# Which values a lease record may not hold is a pure rule: every case of BAD_RECORDS is read by the unit
# tests/unit/test_lease_rules.py. Here the run around it, for one record of each state (a holder that would be
# waited for, a failure that would be believed): reported, taken as an unknown holder that died, built around.
ONE_OF_EACH_STATE = ["ttl Infinity", "failures_before true"]


@pytest.mark.parametrize("case", ONE_OF_EACH_STATE)
def test_an_invalid_lease_record_reads_as_an_unknown_holder(case: str, seeded: Tuple[str, str],
                                                           tmp_path: "os.PathLike[str]",
                                                           fixture_repo: FixtureRepo) -> None:
    shared, key = own_copy(seeded, str(tmp_path))
    plant(shared, key, bad_record(key, case))
    # FLYDSL_LOCK_TIMEOUT ends a waiter that would wait for ever (ttl Infinity, before the fix) with exit 7.
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_LEASE_TTL="1", FLYDSL_LOCK_TIMEOUT="30")
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert f"the lease record leases/tree/{key}/0000000001.json in {shared.url} is not one this tool writes" in said
    assert "the build lease of an unknown host (run ?) on the FlyDSL tree for " in said and "is dead" in said
    assert host.env_twin()["how"] == "built"
    assert shared.files("leases") == []


def test_a_failure_record_dated_an_hour_ahead_does_not_stop_a_newcomer(seeded: Tuple[str, str],
                                                                       tmp_path: "os.PathLike[str]",
                                                                       fixture_repo: FixtureRepo) -> None:
    shared, key = own_copy(seeded, str(tmp_path))
    plant(shared, key, lease_record(key, **dict(FAILED, failures_before=1, ended=time.time() + 3600)))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared)
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "failed twice in the fleet" not in said
    ahead = re.search(r"the failure record of h9 \(run 20261201-000000-1\) on the FlyDSL tree for \w+ is dated "
                      r"(\d+) s ahead of this host's clock: its date is not believed", said)
    assert ahead and 3000 < int(ahead.group(1)) <= 3600, said
    assert host.env_twin()["how"] == "built"


def test_a_failure_record_of_now_still_stops_a_newcomer(seeded: Tuple[str, str], tmp_path: "os.PathLike[str]",
                                                        fixture_repo: FixtureRepo) -> None:
    """The other side of the test above: a second failure written just now is news, and ends the run."""
    shared, key = own_copy(seeded, str(tmp_path))
    plant(shared, key, lease_record(key, **dict(FAILED, failures_before=1, ended=time.time())))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared)
    out = host.run()
    assert out.returncode == 5, out.stderr
    assert "failed twice in the fleet, last on h9 (run 20261201-000000-1): stage build, exit 5: boom" in out.stderr
    assert builds(host.counter, "build") == 0


def test_a_bucket_that_does_not_exist_is_reported_once_and_the_run_builds(tmp_path: "os.PathLike[str]",
                                                                         fixture_repo: FixtureRepo,
                                                                         s3_server: S3Server) -> None:
    shared = SharedCache("s3", str(tmp_path), s3_server)
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/builds"
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_CACHE=missing)
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert said.count(f"cache: {missing} cannot be used in this run") == 1, said
    assert "its bucket or folder does not exist" in said
    assert "does not try it again" in said
    assert host.env_twin()["how"] == "built"


def test_an_ftp_cache_whose_server_is_down_is_reported_once_and_the_run_builds(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """fsspec's FTP connects when the store is made: a refused connection there raised out of the preflight
    (exit 70).  It is an unreachable cache like any other: one line with advice for its kind, then the build."""
    down = f"ftp://user:secret@127.0.0.1:{closed_port()}/fleet-cache"
    shared = SharedCache("folder", str(tmp_path))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_CACHE=down)
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert said.count(f"cache: {down.replace(':secret@', ':***@')} cannot be used in this run") == 1, said
    assert "secret" not in said and "secret" not in open(host.log).read()  # the URL's password is never shown
    assert "ConnectionRefusedError" in said and "check the URL's host, port and credentials" in said
    assert "AWS_ENDPOINT_URL_S3" not in said  # the S3 advice is for S3 caches
    assert host.env_twin()["how"] == "built"


def test_an_unreachable_endpoint_is_tried_once_per_run(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                       s3_server: S3Server) -> None:
    server = ClosingServer()
    shared = SharedCache("s3", str(tmp_path), s3_server)
    env = dict(AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{server.port}")
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, **env)
    # What one operation costs (s3fs's and botocore's retries): the whole run may cost no more.
    one = subprocess.run([sys.executable, "-c", "from ensure_flydsl.trees.backends import open_store, CacheError\n"
                          f"try:\n    open_store({shared.url!r}).read_bytes('entries/x.json', 4096)\n"
                          "except CacheError as exc:\n    print(type(exc).__name__)"],
                         env=dict(host.env), stdout=subprocess.PIPE, text=True, check=True)
    assert one.stdout.strip() == "CacheUnreachable"
    per_operation, server.count = server.count, 0
    assert per_operation > 0
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert server.count == per_operation, (server.count, per_operation)
    assert said.count("cannot be used in this run") == 1, said
    assert "ConnectionClosedError" in said or "EndpointConnectionError" in said
    assert host.env_twin()["how"] == "built"


def test_a_closed_port_is_reported_once_and_the_run_builds(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo,
                                                           s3_server: S3Server) -> None:
    shared = SharedCache("s3", str(tmp_path), s3_server)
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{closed_port()}")
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert said.count(f"cache: {shared.url} cannot be used in this run") == 1, said
    assert "EndpointConnectionError" in said and "does not try it again" in said
    assert said.count("cache: ") == 1, said  # no other step tried it, nor said anything about it
    assert host.env_twin()["how"] == "built"


READ_HUGE = """
import resource, sys
if sys.argv[3] == "limit":  # 1 GiB of address space: a whole read of the planted 8 GiB files cannot happen
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from ensure_flydsl.trees.remote import open_cache
from ensure_flydsl.trees.lease import Leases
cache = open_cache(sys.argv[1])
print(cache.lookup("tree", sys.argv[2]))
print(cache.warnings)
print(Leases(cache.store, 60.0).newest("tree", sys.argv[2]))
"""


@pytest.mark.parametrize("where", ["folder", "s3"])
def test_a_huge_manifest_or_lease_record_is_read_no_further(where: str, tmp_path: "os.PathLike[str]",
                                                            request: pytest.FixtureRequest) -> None:
    """A planted manifest or lease record is never trusted to be small: the store reads at most its bound
    (64 MiB, 64 KiB) plus one byte and refuses it (it was read whole: 8 GiB into memory on every host)."""
    key = "ab" * 32
    if where == "folder":
        shared = SharedCache("folder", str(tmp_path))
        for rel in (f"entries/tree/{key}.json", f"leases/tree/{key}/0000000001.json"):
            os.makedirs(os.path.dirname(os.path.join(shared.url, rel)), exist_ok=True)
            with open(os.path.join(shared.url, rel), "wb") as handle:
                handle.truncate(8 << 30)  # sparse: 8 GiB that take no disk
        limit = "limit"
    else:
        shared = SharedCache("s3", str(tmp_path), request.getfixturevalue("s3_server"))
        assert shared.server is not None
        client = shared.server.client()  # S3 sizes it can hold here: past each bound, not gigabytes
        client.put_object(Bucket=shared.bucket, Key=f"builds/entries/tree/{key}.json", Body=b" " * ((64 << 20) + 1))
        client.put_object(Bucket=shared.bucket, Key=f"builds/leases/tree/{key}/0000000001.json",
                          Body=b" " * ((64 << 10) + 1))
        limit = "none"
    out = subprocess.run([sys.executable, "-c", READ_HUGE, shared.url, key, limit], env=dict(os.environ, **shared.env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    found, warnings, lease = out.stdout.splitlines()
    assert found == "None"  # a miss: the run builds
    assert f"entries/tree/{key}.json is larger than 67108864 bytes, which no record of this tool is" in warnings
    assert "host='an unknown host'" in lease, lease  # a lease of an unknown holder, as any unreadable record


def test_a_generation_beyond_the_last_is_refused_and_built_around(tmp_path: "os.PathLike[str]") -> None:
    store = FolderStore(os.path.join(str(tmp_path), "cache"))
    leases, key = Leases(store, 60.0), "cd" * 32
    last = 10**18 - 1
    assert store.create_exclusive(generation_path("tree", key, last), json.dumps(lease_record(key)).encode())
    assert store.create_exclusive(f"leases/tree/{key}/{10**18}.json", b"{}")  # 19 digits: not a generation
    assert store.create_exclusive(f"leases/tree/{key}/00000000001.json", b"{}")  # a leading zero: not one
    assert leases.generations("tree", key) == [last]
    newest = leases.newest("tree", key)
    assert newest is not None and newest.generation == last and newest.host == "h9"
    taker = LeaseRecord(kind="tree", key=key, generation=last + 1, host="me", run_id="run", pid=os.getpid(),
                        started=time.time(), what="the tree")
    with pytest.raises(CacheError, match="which no run of this tool reaches"):
        leases.take(taker, lambda: (None, None, None))


@pytest.mark.parametrize("where", ["blob", "manifest", "lease"])
def test_a_fifo_in_the_cache_is_refused_without_blocking(where: str, seeded: Tuple[str, str],
                                                         tmp_path: "os.PathLike[str]",
                                                         fixture_repo: FixtureRepo) -> None:
    shared, key = own_copy(seeded, str(tmp_path), keep_tree=where == "blob")
    manifest = os.path.join(shared.url, "entries", "tree", key + ".json")
    if where == "blob":
        with open(manifest) as handle:
            blob = os.path.join(shared.url, "blobs", json.load(handle)["blob"] + ".tar.gz")
        os.unlink(blob)
        os.mkfifo(blob)
    elif where == "manifest":
        os.mkfifo(manifest)
    else:
        os.unlink(plant(shared, key, {}))
        os.mkfifo(os.path.join(shared.url, "leases", "tree", key, "0000000001.json"))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_LEASE_TTL="1")
    out = host.run(timeout=120)  # before the fix: blocked in open() for ever, holding the root's lock
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "is a FIFO, not a regular file" in said
    assert host.env_twin()["how"] == "built"


def test_a_link_planted_as_blobs_gets_no_write(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    shared = SharedCache("folder", str(tmp_path))
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    os.makedirs(elsewhere)
    os.makedirs(shared.url)
    os.symlink(elsewhere, os.path.join(shared.url, "blobs"))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared)
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert os.listdir(elsewhere) == []
    assert f"{os.path.join(shared.url, 'blobs')} in the cache is a symbolic link (to {elsewhere})" in said
    assert "could not publish the tree" in said and "could not publish the mlir" in said
    assert host.env_twin()["how"] == "built"


def test_a_link_planted_as_leases_tree_gets_no_write_and_no_removal(seeded: Tuple[str, str],
                                                                    tmp_path: "os.PathLike[str]",
                                                                    fixture_repo: FixtureRepo) -> None:
    shared, key = own_copy(seeded, str(tmp_path))
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    os.makedirs(os.path.join(elsewhere, key))
    with open(os.path.join(elsewhere, key, "0000000001.json"), "w") as handle:
        handle.write("somebody's file\n")
    before = listing(elsewhere)
    shutil.rmtree(os.path.join(shared.url, "leases"), ignore_errors=True)  # the seeding run's empty folders
    os.makedirs(os.path.join(shared.url, "leases"))
    os.symlink(elsewhere, os.path.join(shared.url, "leases", "tree"))
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_LEASE_TTL="1")
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert listing(elsewhere) == before
    assert open(os.path.join(elsewhere, key, "0000000001.json")).read() == "somebody's file\n"
    assert "the build lease cannot be used now" in said and "is a symbolic link" in said
    assert host.env_twin()["how"] == "built"


def test_lease_generations_go_past_ten_digits(seeded: Tuple[str, str], tmp_path: "os.PathLike[str]",
                                              fixture_repo: FixtureRepo) -> None:
    shared, key = own_copy(seeded, str(tmp_path))
    plant(shared, key, lease_record(key), generation=9999999999)  # a dead holder's
    host = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_LEASE_TTL="1")
    out = host.run()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said
    assert "took the build lease on the FlyDSL tree" in said and "(generation 10000000000)" in said
    assert shared.files("leases") == []  # before the fix the 11-digit generation was never listed, never removed


def test_a_taker_shows_its_own_figures_and_eta_is_0_at_100_percent(seeded: Tuple[str, str],
                                                                    tmp_path: "os.PathLike[str]",
                                                                    fixture_repo: FixtureRepo) -> None:
    shared, _key = own_copy(seeded, str(tmp_path))
    a = fleet_host(str(tmp_path), fixture_repo, "a", shared, FLYDSL_LEASE_TTL="3")
    b = fleet_host(str(tmp_path), fixture_repo, "b", shared, FLYDSL_LEASE_TTL="3")
    pa = a.popen(FIXTURE_BUILD_SLEEP="0 120 0")  # [1/3], [2/3], then it stands at 66.7 % until it is killed
    holder = shared.wait_lease("tree", host="a", percent=66.7)
    pb = b.popen(FIXTURE_BUILD_SLEEP="0.2 0.2 2")  # b's [3/3] stands for two or three of its beats (TTL/4)
    deadline = time.monotonic() + 60
    while not isinstance(json.loads(b.run("status", "--json").stdout).get("waiting_for"), dict):
        assert time.monotonic() < deadline and pb.poll() is None
        time.sleep(0.1)
    while json.loads(b.run("status", "--json").stdout).get("percent") != 66.7:
        assert time.monotonic() < deadline and pb.poll() is None
        time.sleep(0.1)
    os.killpg(pa.pid, signal.SIGKILL)
    pa.wait(timeout=30)
    assert holder["pid"]
    seen: List[Dict[str, object]] = []
    at_100 = None
    deadline = time.monotonic() + 90
    while pb.poll() is None and time.monotonic() < deadline:
        for record in shared.leases("tree"):
            if record.get("host") == "b":
                seen.append(record)
                if record.get("percent") == 100.0 and at_100 is None:
                    at_100 = record
        time.sleep(0.02)
    out, err = pb.communicate(timeout=60)
    assert pb.returncode == 0, out + err
    assert seen, "b never held the lease"
    assert seen[0]["beat"] == 0 and seen[0]["percent"] is None and seen[0]["eta_s"] is None, seen[0]
    assert all(r["percent"] != 66.7 or r["beat"] > 0 for r in seen)
    assert at_100 is not None and at_100["eta_s"] == 0.0, at_100


@pytest.fixture
def nobody() -> Iterator[Nobody]:
    why = unavailable()
    if why:
        pytest.skip(f"needs a second user: {why}")
    helper = Nobody()
    yield helper
    helper.cleanup()


def test_a_read_only_cache_is_used_read_only(nobody: Nobody, fixture_repo: FixtureRepo) -> None:
    """A cache folder another user owns (mode 755) gives this user its entries: fetched, never published to,
    no lease taken, said in one line; before the fix the run was refused with exit 64."""
    repo = FixtureRepo(nobody.copy_repo(fixture_repo.path))
    repo.commits = dict(fixture_repo.commits)
    shared = SharedCache("folder", nobody.dir)
    seed = fleet_host(nobody.dir, repo, "seed", shared)
    seed.env["FLYDSL_PYTHON"] = "/usr/bin/python3"  # the interpreter (ABI) the second user has
    assert seed.run().returncode == 0
    before = listing(shared.url)
    base = nobody.own_folder("mine")
    env = dict(seed.env, FLYDSL_ROOT=os.path.join(base, "FlyDSL"), FLYDSL_HOST_ID="nobody",
               FIXTURE_COUNTER_DIR=nobody.own_folder("counters"), FLYDSL_STORE=nobody.own_folder("store"))
    hit = nobody.run(env)
    said = hit.stdout + hit.stderr
    assert hit.returncode == 0, said
    assert said.count(f"cache: {shared.url} is read-only for this user") == 1, said
    with open(os.path.join(base, "FlyDSL", "flydsl_env.json")) as handle:
        assert json.load(handle)["how"] == "cached"
    # another pin, and --exact-pin: the version-only gate would reuse the fetched tree
    miss = nobody.run(dict(env, FLYDSL_PIN=repo.commits["v0.2.3"], FLYDSL_EXACT_PIN="1"))
    said = miss.stdout + miss.stderr
    assert miss.returncode == 0, said
    assert "took the build lease" not in said and "could not publish" not in said
    with open(os.path.join(base, "FlyDSL", "flydsl_env.json")) as handle:
        assert json.load(handle)["how"] == "built"
    assert listing(shared.url) == before  # nothing written, no lease, no probe object


def test_url_stores_have_timeouts_and_few_retries() -> None:
    """A stalled S3 endpoint cannot hold a run (and the root's lock) for ever: botocore's connects and reads
    time out after half of the network silence limit, with two attempts and no s3fs retry on top (botocore's
    defaults: 60 s each, under s3fs's five retries: six minutes of silence)."""
    from ensure_flydsl.trees.backends import FsspecStore, open_store

    store = open_store("s3://bucket/prefix")
    assert isinstance(store, FsspecStore)
    fs = store.fs
    assert fs.config_kwargs == {"connect_timeout": 10, "read_timeout": 30,
                                "retries": {"mode": "standard", "total_max_attempts": 2}}
    assert fs.retries == 1
