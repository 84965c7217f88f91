"""Property-based tests of the readers of the shared cache's data, which any host or user may have written:
lease records, lease generation names, manifests and the tar members of blobs.  Any input gives the
documented refusal, never another exception (which would end a run with exit 70):

- a lease record: a valid record (every field of the right type and range), or the lease of an unknown
  holder; the waiter's messages and its give-up error are built from either without an exception;
- a lease folder's names: only canonical generation names are generations;
- a manifest: a CacheEntry or ValueError (``lookup``: a miss with a warning);
- a blob's tar members against its manifest: a fetched tree that is exactly the manifest's and stays inside
  its folder, or CacheCorrupt/CacheError with nothing left behind and nothing written outside.

ENSURE_FLYDSL_FUZZ_EXAMPLES scales the number of examples (the default keeps CI short); with
RELIABILITY_FIGURES set each property records what it tried (docs/RELIABILITY.md).
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import math
import os
import shutil
import tarfile
import tempfile
import time
from typing import Counter, Dict, Iterator, List, Optional, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ensure_flydsl.errors import EnsureError
from ensure_flydsl.trees.backends import CacheCorrupt, CacheError, FolderStore
from ensure_flydsl.trees.lease import BUILDING, FAILED, UNKNOWN_HOST, LeaseRecord, Leases, generation_path
from ensure_flydsl.trees.manifest import CacheEntry, cache_key, parse_manifest
from ensure_flydsl.trees.remote import Cache, open_cache
from ensure_flydsl.ways.cache.fleet import believed, build_failure, describe, give_up
from tests.helpers.reliability import record

SCALE = float(os.environ.get("ENSURE_FLYDSL_FUZZ_EXAMPLES") or 1)
TRIED: Counter[str] = collections.Counter()
KEY = "ab" * 32
FIELDS = {"repo": "example.org/FlyDSL", "commit": "0" * 40}
TREE_KEY = cache_key("tree", FIELDS)


def examples(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module", autouse=True)
def _record_what_was_tried() -> Iterator[None]:
    yield
    for what, count in sorted(TRIED.items()):
        name, _, outcome = what.partition(":")
        if outcome == "":
            record("fuzz_reader", what=name, examples=count,
                   refused=TRIED[f"{name}:refused"], accepted=TRIED[f"{name}:accepted"], exceptions=0)


# -- lease records -------------------------------------------------------------------------------------------
JSON_SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True, allow_infinity=True)
                | st.text(max_size=30) | st.sampled_from([BUILDING, FAILED, "tree", KEY, "", "\n\x1b[31m"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
LEASE_FIELDS = ["kind", "key", "generation", "host", "run_id", "pid", "started", "what", "failures_before", "ttl",
                "state", "beat", "heartbeat", "elapsed_s", "step", "percent", "eta_s", "failure", "ended"]


def valid_record() -> Dict[str, object]:
    now = time.time()
    return {"kind": "tree", "key": KEY, "generation": 1, "host": "h", "run_id": "r", "pid": 1, "started": now,
            "what": "the FlyDSL tree for 01234567", "failures_before": 0, "ttl": 120.0, "state": BUILDING,
            "beat": 0, "heartbeat": now, "elapsed_s": 0.0, "step": "build", "percent": 10.0, "eta_s": 3.0,
            "failure": None, "ended": None}


FAILURES = st.fixed_dictionaries({"stage": st.none() | st.text(max_size=8) | st.sampled_from(["llvm", "build", "verify",
                                                                                             "lease", "fetch"]),
                                  "exit_code": st.integers(-1, 256) | JSON_SCALARS,
                                  "reason": st.text(max_size=40) | JSON_SCALARS})
LEASE_DOCS = st.one_of(
    # a valid record with some fields replaced by anything, or dropped
    st.builds(lambda changes, dropped: {k: v for k, v in dict(valid_record(), **changes).items() if k not in dropped},
              st.dictionaries(st.sampled_from(LEASE_FIELDS), JSON_VALUES | FAILURES, max_size=4),
              st.sets(st.sampled_from(LEASE_FIELDS), max_size=2)),
    JSON_VALUES,
)


def lease_bytes() -> st.SearchStrategy[bytes]:
    as_json = LEASE_DOCS.map(lambda doc: json.dumps(doc).encode())  # json writes NaN and Infinity; and reads them
    return st.one_of(as_json, as_json.map(lambda data: data[: len(data) // 2]), st.binary(max_size=200))


def check_record(got: LeaseRecord, data: bytes) -> None:
    assert got.raw == data and got.kind == "tree" and got.key == KEY and got.generation == 7
    if got.invalid is not None:
        assert got.host == UNKNOWN_HOST and got.state == BUILDING and got.ttl == 0.0
        return
    for name in ("host", "run_id", "what"):
        assert isinstance(getattr(got, name), str) and getattr(got, name).isprintable()
    for name in ("pid", "failures_before", "beat"):
        value = getattr(got, name)
        assert type(value) is int and value >= 0
    for name in ("started", "heartbeat", "elapsed_s", "ttl"):
        value = getattr(got, name)
        assert type(value) is float and math.isfinite(value) and value >= 0
    assert got.ttl < 10**6
    for name, top in (("percent", 100.0), ("eta_s", 1e10), ("ended", 1e10)):
        value = getattr(got, name)
        assert value is None or (type(value) is float and 0 <= value <= top)
    assert got.state in (BUILDING, FAILED)
    if got.state == FAILED:
        assert got.failure is not None and got.ended is not None
    if got.failure is not None:
        code = got.failure["exit_code"]
        assert type(code) is int and 2 <= code <= 8  # a build step's: never 0, 75, 130 or 9 from a record
        assert isinstance(got.failure["reason"], str) and str(got.failure["reason"]).isprintable()
    again = LeaseRecord.from_bytes(got.to_bytes(), "tree", KEY, 7)  # what a valid record writes reads back
    assert again.invalid is None and again.to_bytes() == got.to_bytes()


@examples(400)
@given(data=lease_bytes())
def test_any_lease_record_reads_as_a_record_or_an_unknown_holder(data: bytes) -> None:
    TRIED["lease record"] += 1
    got = LeaseRecord.from_bytes(data, "tree", KEY, 7)
    check_record(got, data)
    TRIED["lease record:refused" if got.invalid else "lease record:accepted"] += 1
    text = describe(got)  # what a waiter says and shows in `status`
    assert got.host in text and "\n" not in text
    error = give_up(got, "the FlyDSL tree for 01234567")
    assert isinstance(error, EnsureError) and 2 <= int(error.code) <= 8 and "\n" not in error.reason
    seen = believed(got)  # what a waiter acts on: a failure it believes is a build step's, with its exit code
    if seen.state == FAILED:
        failure = seen.failure or {}
        stage = build_failure(failure.get("stage"), failure.get("exit_code"))
        assert stage is not None and give_up(seen, "x").code == stage.exit_code and give_up(seen, "x").stage == stage
    else:
        assert seen.invalid is not None or got.state == BUILDING


GENERATION_NAMES = st.one_of(
    st.integers(0, 10**25).map(lambda n: f"{n:010d}.json"),
    st.integers(0, 10**25).map(lambda n: f"{n:012d}.json"),
    st.text(alphabet="0123456789.jsonx-", min_size=1, max_size=30),
)


@examples(100)
@given(names=st.lists(GENERATION_NAMES, max_size=6, unique=True), payload=lease_bytes())
def test_a_lease_folder_of_any_names_lists_only_canonical_generations(names: List[str], payload: bytes) -> None:
    TRIED["lease folder"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        store = FolderStore(tmp)
        folder = os.path.join(tmp, "leases", "tree", KEY)
        os.makedirs(folder)
        for name in names:
            if name not in (".", ".."):
                with open(os.path.join(folder, name), "wb") as handle:
                    handle.write(payload)
        leases = Leases(store, 60.0)
        found = leases.generations("tree", KEY)
        assert found == sorted(found) and all(0 <= g < 10**18 for g in found)
        assert {generation_path("tree", KEY, g).rsplit("/", 1)[1] for g in found} <= set(names)
        newest = leases.newest("tree", KEY)
        assert (newest is None) == (not found)
        if newest is not None:
            check_record(LeaseRecord.from_bytes(newest.raw, "tree", KEY, 7), newest.raw)
        TRIED["lease folder:accepted" if found else "lease folder:refused"] += 1


# -- manifests -----------------------------------------------------------------------------------------------
def valid_manifest() -> Dict[str, object]:
    return {"format": 1, "kind": "tree", "key": TREE_KEY, "fields": FIELDS, "blob": "c" * 64, "size": 10,
            "created": 1.0, "host": "h", "tool": "t",
            "members": [{"path": "d", "type": "dir", "mode": 0o755, "size": 0},
                        {"path": "d/f", "type": "file", "mode": 0o644, "size": 1, "sha256": "e" * 64},
                        {"path": "l", "type": "symlink", "mode": 0o777, "size": 0, "target": "d/f"}]}


MANIFEST_FIELDS = ["format", "kind", "key", "fields", "blob", "size", "created", "host", "tool", "members"]
MEMBER_FIELDS = ["path", "type", "mode", "size", "sha256", "target"]
MANIFEST_DOCS = st.one_of(
    st.builds(lambda changes, dropped: {k: v for k, v in dict(valid_manifest(), **changes).items() if k not in dropped},
              st.dictionaries(st.sampled_from(MANIFEST_FIELDS), JSON_VALUES, max_size=3),
              st.sets(st.sampled_from(MANIFEST_FIELDS), max_size=2)),
    st.builds(lambda i, changes: dict(valid_manifest(), members=[
        dict(m, **changes) if n == i else m for n, m in enumerate(valid_manifest()["members"])]),  # type: ignore
        st.integers(0, 2), st.dictionaries(st.sampled_from(MEMBER_FIELDS), JSON_VALUES, max_size=3)),
    JSON_VALUES,
)


@examples(300)
@given(doc=MANIFEST_DOCS, cut=st.booleans())
def test_any_manifest_is_an_entry_or_a_one_line_refusal(doc: object, cut: bool) -> None:
    TRIED["manifest"] += 1
    data = json.dumps(doc).encode()
    data = data[: len(data) // 2] if cut else data
    try:
        entry = parse_manifest(data)
    except ValueError as exc:
        assert "\n" not in str(exc)
        TRIED["manifest:refused"] += 1
        return
    TRIED["manifest:accepted"] += 1
    assert entry.kind == "tree" and entry.key == TREE_KEY and entry.size >= 0
    for member in entry.members:
        assert member.type in ("file", "dir", "symlink") and 0 <= member.mode <= 0o7777


@examples(60)
@given(doc=MANIFEST_DOCS)
def test_lookup_of_any_manifest_is_an_entry_or_a_miss_with_a_warning(doc: object) -> None:
    TRIED["manifest lookup"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "entries", "tree", TREE_KEY + ".json")
        os.makedirs(os.path.dirname(path))
        with open(path, "w") as handle:
            json.dump(doc, handle)
        cache = open_cache(tmp)
        entry = cache.lookup("tree", TREE_KEY)
        assert (entry is None) == bool(cache.warnings)
        TRIED["manifest lookup:refused" if entry is None else "manifest lookup:accepted"] += 1


# -- tar members ---------------------------------------------------------------------------------------------
NAMES = st.sampled_from(["a", "b", "..", ".", "", "a/b", "../x", "/etc/x", "a//b", "a/../b", "c\x00"])
KINDS = st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo", "device"])
TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
             "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE, "device": tarfile.CHRTYPE}
MEMBERS = st.lists(st.tuples(NAMES, KINDS, st.sampled_from([b"", b"x", b"xy" * 50]), NAMES,
                             st.sampled_from([0o644, 0o755, 0o777, 0o4755, 0o000])), max_size=6)


def _plausible(items: List[Tuple[str, str, bytes, str, int]]) -> List[Tuple[str, str, bytes, str, int]]:
    """A tree as the tool packs it (folders first, each parent before its children), from random items."""
    out: List[Tuple[str, str, bytes, str, int]] = []
    seen = set()
    for name, kind, data, target, mode in sorted(items):
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent not in seen:
                seen.add(parent)
                out.append((parent, "dir", b"", "", 0o755))
        if name not in seen:
            seen.add(name)
            out.append((name, kind, data, target, mode))
    return out


PLAUSIBLE = st.lists(st.tuples(st.sampled_from(["a/x", "a/y", "b", "c/d/e", "c/f"]),
                               st.sampled_from(["file", "file", "symlink", "dir"]),
                               st.sampled_from([b"", b"x", b"\0" * 3000]),
                               st.sampled_from(["x", "../b", "../../b", "d/e", "/etc/passwd", "..", "."]),
                               st.sampled_from([0o644, 0o755, 0o600])), max_size=5).map(_plausible)
TREES = st.one_of(PLAUSIBLE, PLAUSIBLE, MEMBERS)


def make_blob(members: List[Tuple[str, str, bytes, str, int]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, target, mode in members:
            if "\x00" in name or "\x00" in target:
                continue  # tarfile cannot write them; the manifest may still name them
            info = tarfile.TarInfo(name or "x")
            info.type, info.mode, info.linkname = TAR_TYPES[kind], mode, target
            info.size = len(data) if kind == "file" else 0
            tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return raw.getvalue()


def manifest_members(members: List[Tuple[str, str, bytes, str, int]]) -> List[Dict[str, object]]:
    out: List[Dict[str, object]] = []
    for name, kind, data, target, mode in members:
        rec: Dict[str, object] = {"path": name, "type": kind if kind in ("file", "dir", "symlink") else "file",
                                  "mode": mode, "size": len(data) if kind == "file" else 0}
        if rec["type"] == "file":
            rec["sha256"] = hashlib.sha256(data).hexdigest()
        if kind == "symlink":
            rec["target"] = target
        out.append(rec)
    return out


def inside(path: str, top: str) -> bool:
    return os.path.realpath(path) == top or os.path.realpath(path).startswith(top + os.sep)


@examples(150)
@given(members=TREES, other=st.none() | st.none() | TREES, damage=st.sampled_from([False, False, True]))
def test_any_blob_is_fetched_exactly_or_refused_leaving_nothing(
        members: List[Tuple[str, str, bytes, str, int]],
        other: Optional[List[Tuple[str, str, bytes, str, int]]], damage: bool) -> None:
    """A random tar, with a manifest of its own members or of other ones (a lying manifest)."""
    TRIED["tar members"] += 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = os.path.realpath(tmp)
        cache_dir, work = os.path.join(tmp, "cache"), os.path.join(tmp, "work")
        outside = os.path.join(tmp, "outside")
        for folder in (cache_dir, work, outside):
            os.makedirs(folder)
        blob = make_blob(members)
        if damage:
            blob = blob[:-9] + bytes([blob[-9] ^ 1]) + blob[-8:]
        sha = hashlib.sha256(blob).hexdigest()
        os.makedirs(os.path.join(cache_dir, "blobs"))
        with open(os.path.join(cache_dir, "blobs", sha + ".tar.gz"), "wb") as handle:
            handle.write(blob)
        doc = dict(valid_manifest(), blob=sha, size=len(blob), members=manifest_members(other or members))
        try:
            entry: Optional[CacheEntry] = parse_manifest(json.dumps(doc).encode())
        except ValueError:
            entry = None  # refused at the manifest (a path of NUL...)
        dest = os.path.join(work, "tree")
        cache = Cache(FolderStore(cache_dir))
        if entry is not None:
            try:
                cache.get(entry, dest)
                fetched = True
            except (CacheCorrupt, CacheError):
                fetched = False
        else:
            fetched = False
        TRIED["tar members:accepted" if fetched else "tar members:refused"] += 1
        assert os.listdir(outside) == []
        if not fetched:
            assert os.listdir(work) == []  # no tree, no staging folder
            return
        assert entry is not None
        assert os.listdir(work) == ["tree"]
        found = {}
        for folder, dirs, files in os.walk(dest):
            for name in dirs + files:
                full = os.path.join(folder, name)
                rel = os.path.relpath(full, dest)
                found[rel] = full
                assert os.path.islink(full) or inside(full, dest)
                if os.path.islink(full):
                    assert inside(full, dest), f"{rel} -> {os.readlink(full)} leaves the tree"
                mode = os.lstat(full).st_mode
                assert os.path.islink(full) or not mode & 0o7022  # no setuid, no group/world write
        assert sorted(found) == sorted(m.path for m in entry.members)
        shutil.rmtree(dest)
