"""The binary cache: keys, round trips, every way an entry can be corrupt or hostile, races, full disks, S3."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from ensure_flydsl.binary_cache.entries import (
    Cache,
    CacheCorrupt,
    CacheEntry,
    CacheError,
    Member,
    cache_key,
    format_size,
    open_cache,
    parse_size,
)
from tests.helpers.cache_entries import FIELDS, KEY, _member, blob_file, manifest_file, publish_raw
from tests.helpers.s3_server import S3Server


def make_tree(root: str, seed: str = "a", big: int = 0) -> str:
    """Nested files, an executable, a relative symlink, an empty folder, a group-writable file."""
    os.makedirs(os.path.join(root, "flydsl", "_mlir", "lib"))
    os.makedirs(os.path.join(root, "empty"))
    write(os.path.join(root, "flydsl", "__init__.py"), f"__version__ = '0.2.2'  # {seed}\n")
    write(os.path.join(root, "flydsl", "_mlir", "lib", "libFly.so.1"), seed * 1000)
    os.symlink("libFly.so.1", os.path.join(root, "flydsl", "_mlir", "lib", "libFly.so"))
    tool = os.path.join(root, "flydsl", "tool.sh")
    write(tool, "#!/bin/sh\necho hi\n")
    os.chmod(tool, 0o755)
    shared = os.path.join(root, "flydsl", "shared.txt")
    write(shared, "shared")
    os.chmod(shared, 0o666)
    if big:
        with open(os.path.join(root, "big.bin"), "wb") as handle:
            handle.write(hashlib.sha256(seed.encode()).digest() * (big // 32))
    return root


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def snapshot(root: str) -> Dict[str, Tuple[str, int, str]]:
    """Every path under root: its type, permission bits, and its content or symlink target."""
    found: Dict[str, Tuple[str, int, str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if os.path.islink(full):
                found[rel] = ("link", 0, os.readlink(full))
            elif os.path.isdir(full):
                found[rel] = ("dir", st.st_mode & 0o777, "")
            else:
                found[rel] = ("file", st.st_mode & 0o777, hashlib.sha256(open(full, "rb").read()).hexdigest())
    return found


@pytest.fixture
def cache_dir(tmp_path: "os.PathLike[str]") -> str:
    return os.path.join(str(tmp_path), "cache")


@pytest.fixture
def work(tmp_path: "os.PathLike[str]") -> str:
    """The folder a fetch's destination lives in: it must hold nothing afterwards unless the fetch succeeded."""
    path = os.path.join(str(tmp_path), "work")
    os.makedirs(path)
    return path


def published(cache_dir: str, tmp_path: "os.PathLike[str]", big: int = 0) -> Tuple[Cache, CacheEntry, str]:
    source = make_tree(os.path.join(str(tmp_path), "src-" + uuid.uuid4().hex[:6]), big=big)
    cache = open_cache(cache_dir)
    return cache, cache.publish("tree", KEY, FIELDS, source), source


def assert_rejected(cache: Cache, entry: CacheEntry, work: str, reason: str) -> CacheCorrupt:
    dest = os.path.join(work, "dest")
    with pytest.raises(CacheCorrupt) as caught:
        cache.fetch(entry, dest)
    assert reason in caught.value.reason, caught.value.reason
    assert "\n" not in caught.value.reason
    assert os.listdir(work) == [], "a rejected fetch left something behind"
    return caught.value


# -- keys and sizes -------------------------------------------------------------------------------------
def test_cache_key_is_canonical_json_stable_and_sensitive_to_every_field() -> None:
    canonical = json.dumps({"kind": "tree", **FIELDS}, sort_keys=True, separators=(",", ":"))
    assert KEY == hashlib.sha256(canonical.encode()).hexdigest()
    assert cache_key("tree", dict(reversed(list(FIELDS.items())))) == KEY  # order does not matter
    assert cache_key("mlir", FIELDS) != KEY
    for name in FIELDS:
        changed = dict(FIELDS, **{name: "other"})
        assert cache_key("tree", changed) != KEY, name
        assert cache_key("tree", {k: v for k, v in FIELDS.items() if k != name}) != KEY, name
    assert cache_key("tree", dict(FIELDS, extra=None)) != KEY
    nested = dict(FIELDS, settings={"jobs_independent": True, "rocm": "/opt/rocm2"})
    assert cache_key("tree", nested) != KEY
    with pytest.raises(ValueError):
        cache_key("tree", {"kind": "mlir"})
    with pytest.raises(ValueError):
        cache_key("tree", {"when": object()})


@pytest.mark.parametrize("text, size", [("1234", 1234), ("0", 0), ("500M", 500 * 1024**2), ("2G", 2 * 1024**3),
                                        ("1.5T", int(1.5 * 1024**4)), ("10k", 10240), ("2GiB", 2 * 1024**3),
                                        (" 500MB ", 500 * 1024**2), ("7b", 7)])
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("junk", ["", "M", "-1", "1.2.3", "12X", "ten", "1e9", "nan", "inf", "5 G B"])
def test_parse_size_refuses_junk(junk: str) -> None:
    with pytest.raises(ValueError):
        parse_size(junk)


def test_format_size() -> None:
    assert [format_size(n) for n in (0, 1023, 1536, 270 * 1024**2, 3 * 1024**4)] == \
        ["0 B", "1023 B", "1.5 KiB", "270.0 MiB", "3.0 TiB"]


# -- a folder cache ------------------------------------------------------------------------------------
def test_round_trip_keeps_files_modes_symlinks_and_never_world_writable(cache_dir: str, work: str,
                                                                        tmp_path: "os.PathLike[str]") -> None:
    cache, entry, source = published(cache_dir, tmp_path)
    assert (entry.kind, entry.key, entry.fields, entry.files) == ("tree", KEY, FIELDS, 4)
    assert entry.size == os.path.getsize(blob_file(cache_dir, entry))
    assert entry.blob == hashlib.sha256(open(blob_file(cache_dir, entry), "rb").read()).hexdigest()
    found = cache.lookup("tree", KEY)
    assert found == entry and found is not None and found.members == entry.members
    dest = os.path.join(work, "python_packages")
    cache.fetch(found, dest)
    assert os.listdir(work) == ["python_packages"]  # the temporary sibling is gone
    want = snapshot(source)
    want["flydsl/shared.txt"] = ("file", 0o644, want["flydsl/shared.txt"][2])  # group/world write dropped
    assert snapshot(dest) == want
    assert os.access(os.path.join(dest, "flydsl", "tool.sh"), os.X_OK)
    assert open(os.path.join(dest, "flydsl", "_mlir", "lib", "libFly.so")).read() == "a" * 1000
    src_init, got_init = (os.path.join(p, "flydsl", "__init__.py") for p in (source, dest))
    assert int(os.stat(got_init).st_mtime) == int(os.stat(src_init).st_mtime)  # .pyc files stay valid
    for path in [cache_dir] + [os.path.join(f, n) for f, ds, fs in os.walk(cache_dir) for n in ds + fs]:
        assert not os.stat(path).st_mode & 0o002, path
    again = cache.publish("tree", KEY, FIELDS, source)
    assert again.blob == entry.blob  # deterministic: same folder, same bytes, one blob
    assert os.listdir(os.path.join(cache_dir, "blobs")) == [entry.blob + ".tar.gz"]
    with pytest.raises(CacheError, match="already exists"):
        cache.fetch(found, dest)


def test_lookup_miss_and_unreadable_manifests_are_misses(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    assert open_cache(cache_dir).lookup("tree", KEY) is None  # the folder does not even exist yet
    assert open_cache(cache_dir).entries() == []
    cache, entry, _source = published(cache_dir, tmp_path)
    assert cache.lookup("mlir", KEY) is None and cache.lookup("tree", "0" * 64) is None
    with open(manifest_file(cache_dir), "r+b") as handle:
        handle.truncate(40)  # a torn file (written by something that did not write atomically)
    fresh = open_cache(cache_dir)
    assert fresh.lookup("tree", KEY) is None
    assert "not JSON" in fresh.warnings[0] and fresh.entries() == []
    repaired = cache.publish("tree", KEY, FIELDS, _source)  # the next publish replaces it
    assert open_cache(cache_dir).lookup("tree", KEY) == repaired and repaired.blob == entry.blob
    other = cache_key("tree", dict(FIELDS, commit="b" * 40))
    os.rename(manifest_file(cache_dir), manifest_file(cache_dir, key=other))  # a manifest under a foreign name
    moved = open_cache(cache_dir)
    assert moved.lookup("tree", other) is None and "describes tree/" in moved.warnings[0]


def test_bad_arguments(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    source = make_tree(os.path.join(str(tmp_path), "src"))
    with pytest.raises(ValueError, match="is not cache_key"):
        cache.publish("tree", "0" * 64, FIELDS, source)
    with pytest.raises(ValueError, match="kind"):
        cache.lookup("../x", KEY)
    with pytest.raises(ValueError, match="sha256"):
        cache.lookup("tree", "../../etc/passwd")
    with pytest.raises(CacheError, match="not a folder"):
        cache.publish("tree", KEY, FIELDS, os.path.join(source, "flydsl", "tool.sh"))
    with pytest.raises(CacheError, match="not a folder"):
        open_cache(os.path.join(source, "flydsl", "tool.sh"))


def test_publish_refuses_trees_a_fetch_would_refuse(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    source = make_tree(os.path.join(str(tmp_path), "src"))
    link = os.path.join(source, "flydsl", "etc")
    os.symlink("/etc", link)
    with pytest.raises(CacheError, match="points to the absolute path '/etc'"):
        cache.publish("tree", KEY, FIELDS, source)
    os.unlink(link)
    os.symlink("../../outside", link)
    with pytest.raises(CacheError, match="resolves outside"):
        cache.publish("tree", KEY, FIELDS, source)
    os.unlink(link)
    os.mkfifo(os.path.join(source, "pipe"))
    with pytest.raises(CacheError, match="not a regular file, folder or symlink"):
        cache.publish("tree", KEY, FIELDS, source)
    assert not os.path.exists(cache_dir)  # refused before anything was uploaded


# -- corrupt entries -----------------------------------------------------------------------------------
def test_a_flipped_byte_in_the_blob_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path)
    with open(blob_file(cache_dir, entry), "r+b") as handle:
        handle.seek(entry.size // 2)
        byte = handle.read(1)
        handle.seek(entry.size // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    assert_rejected(cache, entry, work, f"blob sha256 mismatch: expected {entry.blob[:12]}")


def test_a_truncated_blob_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path, big=1 << 20)
    with open(blob_file(cache_dir, entry), "r+b") as handle:
        handle.truncate(entry.size - 100)
    assert_rejected(cache, entry, work, "truncated")
    os.unlink(blob_file(cache_dir, entry))
    assert_rejected(cache, entry, work, "missing from the cache")


def test_a_truncated_blob_with_a_manifest_that_matches_it_is_rejected(cache_dir: str, work: str,
                                                                      tmp_path: "os.PathLike[str]") -> None:
    cache, entry, _source = published(cache_dir, tmp_path, big=1 << 20)
    data = open(blob_file(cache_dir, entry), "rb").read()[: entry.size // 2]
    sha = hashlib.sha256(data).hexdigest()
    with open(os.path.join(cache_dir, "blobs", sha + ".tar.gz"), "wb") as handle:
        handle.write(data)
    manifest = json.load(open(manifest_file(cache_dir)))
    manifest.update(blob=sha, size=len(data))
    with open(manifest_file(cache_dir), "w") as handle:
        json.dump(manifest, handle)
    bad = cache.lookup("tree", KEY)
    assert bad is not None
    assert_rejected(cache, bad, work, "is not a readable gzip'd tar")


Edit = Callable[[List[Dict[str, object]]], object]


def _tamper(cache_dir: str, edit: Edit) -> None:
    manifest = json.load(open(manifest_file(cache_dir)))
    edit(manifest["members"])
    with open(manifest_file(cache_dir), "w") as handle:
        json.dump(manifest, handle)


@pytest.mark.parametrize("edit, reason", [
    (lambda ms: [m.update(sha256="0" * 64) for m in ms if m["path"] == "flydsl/tool.sh"],
     "extracted file 'flydsl/tool.sh' sha256 mismatch"),
    (lambda ms: ms.append({"path": "flydsl/extra.py", "type": "file", "mode": 0o644, "size": 0,
                           "sha256": hashlib.sha256(b"").hexdigest()}),
     "manifest member 'flydsl/extra.py' is missing from the blob"),
    (lambda ms: ms.remove(next(m for m in ms if m["path"] == "flydsl/__init__.py")),
     "member 'flydsl/__init__.py' is not in the manifest"),
    (lambda ms: [m.update(mode=0o4755) for m in ms if m["path"] == "flydsl/tool.sh"],
     "member 'flydsl/tool.sh' differs from the manifest in its mode"),
    (lambda ms: [m.update(target="libFly.so.2") for m in ms if m["type"] == "symlink"],
     "differs from the manifest in its target"),
])
def test_a_tampered_manifest_is_rejected(cache_dir: str, work: str, tmp_path: "os.PathLike[str]",
                                         edit: Edit, reason: str) -> None:
    cache, _entry, _source = published(cache_dir, tmp_path)
    _tamper(cache_dir, edit)
    tampered = cache.lookup("tree", KEY)
    assert tampered is not None
    assert_rejected(cache, tampered, work, reason)


# -- hostile tarballs, published by hand with a manifest that is correct for their bytes -------------------
HOSTILE = {
    "dotdot": ([_member("../evil", data=b"x")], "member '../evil' escapes the destination"),
    "dotdot-deep": ([_member("a", tarfile.DIRTYPE, mode=0o755), _member("a/../../../evil", data=b"x")],
                    "escapes the destination"),
    "absolute": ([_member("{abs}", data=b"x")], "is an absolute path"),
    "symlink-out": ([_member("link", tarfile.SYMTYPE, target="../../outside"),
                     _member("link/evil", data=b"x")], "resolves outside the destination"),
    "symlink-abs": ([_member("link", tarfile.SYMTYPE, target="{outside}")], "points to the absolute path"),
    "symlink-chain": ([_member("b", tarfile.DIRTYPE, mode=0o755), _member("b/c", tarfile.SYMTYPE, target=".."),
                       _member("a", tarfile.SYMTYPE, target="b/c"), _member("x", tarfile.SYMTYPE, target="a/..")],
                      "symlink 'x' -> 'a/..' resolves outside"),
    "through-inner-symlink": ([_member("d", tarfile.DIRTYPE, mode=0o755), _member("l", tarfile.SYMTYPE, target="d"),
                               _member("l/f", data=b"x")], "is written through the symlink 'l'"),
    "hardlink": ([_member("f", data=b"x"), _member("g", tarfile.LNKTYPE, target="f")], "'g' is a hard link"),
    "hardlink-out": ([_member("g", tarfile.LNKTYPE, target="{outside}/victim")], "'g' is a hard link"),
    "device": ([_member("null", tarfile.CHRTYPE)], "'null' is a device file"),
    "fifo": ([_member("pipe", tarfile.FIFOTYPE)], "'pipe' is a fifo"),
    "duplicate": ([_member("f", data=b"x"), _member("f", data=b"y")], "'f' appears twice"),
    "dot-slash": ([_member("./f", data=b"x")], "not a normalised relative path"),
    "orphan-member": ([_member("nowhere/f", data=b"x")], "does not follow its folder 'nowhere'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_tarballs_are_rejected_before_anything_is_written(case: str, cache_dir: str, work: str,
                                                                  tmp_path: "os.PathLike[str]") -> None:
    outside = os.path.join(str(tmp_path), "outside")
    os.makedirs(outside)
    write(os.path.join(outside, "victim"), "precious")
    spec, reason = HOSTILE[case]
    members = []
    for info, data in spec:
        info = _copy(info)
        info.name = info.name.replace("{abs}", os.path.join(outside, "abs-evil"))
        info.linkname = info.linkname.replace("{outside}", outside)
        members.append((info, data))
    entry = publish_raw(cache_dir, members)
    assert_rejected(open_cache(cache_dir), entry, work, reason)
    assert sorted(os.listdir(outside)) == ["victim"] and open(os.path.join(outside, "victim")).read() == "precious"
    assert sorted(os.listdir(str(tmp_path))) == ["cache", "outside", "work"]


def _copy(info: tarfile.TarInfo) -> tarfile.TarInfo:
    new = tarfile.TarInfo(info.name)
    for field in ("type", "mode", "linkname", "size", "devmajor", "devminor"):
        setattr(new, field, getattr(info, field))
    return new


def test_the_tar_itself_is_checked_not_only_its_manifest(cache_dir: str, work: str) -> None:
    """An innocent manifest does not vouch for a tarball whose bytes match it but whose members do not."""
    entry = publish_raw(cache_dir, [_member("../evil", data=b"x")])
    honest = Member("evil", "file", 0o644, 1, hashlib.sha256(b"x").hexdigest())
    lying = CacheEntry(entry.kind, entry.key, entry.blob, entry.size, entry.created, entry.fields, 1,
                       members=(honest,))
    # Each header is held against the manifest before its member is written: ../evil is not in it.
    assert_rejected(open_cache(cache_dir), lying, work, "member '../evil' is not in the manifest")


def test_modes_from_a_hand_made_manifest_are_never_group_or_world_writable(cache_dir: str, work: str) -> None:
    entry = publish_raw(cache_dir, [_member("d", tarfile.DIRTYPE, mode=0o777),
                                    _member("d/f", data=b"x", mode=0o6777)])
    dest = os.path.join(work, "dest")
    open_cache(cache_dir).fetch(entry, dest)
    assert os.stat(os.path.join(dest, "d")).st_mode & 0o7777 == 0o755
    assert os.stat(os.path.join(dest, "d", "f")).st_mode & 0o7777 == 0o755


# -- races, pruning, full disks ------------------------------------------------------------------------
RACE_SCRIPT = textwrap.dedent("""
    import os, shutil, sys, time
    from ensure_flydsl.binary_cache.entries import open_cache, cache_key
    role, cache_dir, go, stop = sys.argv[1:5]
    fields = {"commit": "c" * 40, "abi": "race"}
    key = cache_key("tree", fields)
    while not os.path.exists(go):
        time.sleep(0.001)
    cache = open_cache(cache_dir)
    if role == "reader":
        fetched = misses = 0
        while not os.path.exists(stop) or fetched == 0:
            entry = cache.lookup("tree", key)
            if entry is None:
                misses += 1
                continue
            dest = os.path.join(sys.argv[5], "d%d" % fetched)
            cache.fetch(entry, dest)  # must never fail for an entry whose manifest was seen
            who = open(os.path.join(dest, "who")).read()
            assert open(os.path.join(dest, "data.bin"), "rb").read() == who.encode() * (1 << 20), who
            shutil.rmtree(dest)
            fetched += 1
        print(fetched, misses)
    else:
        for i in range(6):
            cache.publish("tree", key, fields, sys.argv[5 + (i % 2)])
""")


def test_concurrent_publishers_of_one_key_and_a_reader(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    base = str(tmp_path)
    sources = []
    for who in "AB":
        src = os.path.join(base, "src" + who)
        os.makedirs(src)
        write(os.path.join(src, "who"), who)
        with open(os.path.join(src, "data.bin"), "wb") as handle:
            handle.write(who.encode() * (1 << 20))
        sources.append(src)
    go, stop, fetched = (os.path.join(base, n) for n in ("go", "stop", "fetched"))
    os.makedirs(fetched)
    script = os.path.join(base, "race.py")
    write(script, RACE_SCRIPT)
    run = [sys.executable, script]
    procs = [subprocess.Popen(run + ["publisher", cache_dir, go, stop, sources[0], sources[1]]),
             subprocess.Popen(run + ["publisher", cache_dir, go, stop, sources[1], sources[0]])]
    reader = subprocess.Popen(run + ["reader", cache_dir, go, stop, fetched], stdout=subprocess.PIPE, text=True)
    write(go, "")
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    write(stop, "")
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0, out
    assert int(out.split()[0]) >= 1
    cache = open_cache(cache_dir)
    entry = cache.lookup("tree", cache_key("tree", {"commit": "c" * 40, "abi": "race"}))
    assert entry is not None
    cache.fetch(entry, os.path.join(base, "final"))
    names = os.listdir(os.path.join(cache_dir, "blobs"))
    assert len(names) == 2  # one blob per content, no stray upload, each named by its bytes
    for name in names:
        assert name == hashlib.sha256(open(os.path.join(cache_dir, "blobs", name), "rb").read()).hexdigest() + \
            ".tar.gz"


def test_prune_by_size_keeps_the_newest_and_removes_orphans(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    entries = []
    for n in range(3):
        fields = dict(FIELDS, commit=str(n) * 40)
        source = make_tree(os.path.join(str(tmp_path), f"src{n}"), seed=str(n), big=256 << 10)
        entries.append(cache.publish("tree", cache_key("tree", fields), fields, source))
        time.sleep(0.01)
    blobs = os.path.join(cache_dir, "blobs")
    fresh_orphan, old_orphan, old_upload = (os.path.join(blobs, n) for n in
                                            ("f" * 64 + ".tar.gz", "e" * 64 + ".tar.gz", ".upload.x.tmp"))
    for path in (fresh_orphan, old_orphan, old_upload):
        write(path, "orphan")
    week_ago = time.time() - 7 * 86400
    os.utime(old_orphan, (week_ago, week_ago))
    os.utime(old_upload, (week_ago, week_ago))
    foreign = os.path.join(blobs, "README")
    write(foreign, "not ours")
    removed = cache.prune(10 << 30)  # nothing over the limit: only what no manifest names, once old
    assert sorted(str(e.fields["path"]) for e in removed) == ["blobs/.upload.x.tmp", "blobs/" + "e" * 64 + ".tar.gz"]
    assert {e.kind for e in removed} == {"orphan"} and len(cache.entries()) == 3
    removed = cache.prune(entries[2].size)
    kinds = [(e.kind, e.key) for e in removed if e.kind != "orphan"]
    assert kinds == [("tree", entries[0].key), ("tree", entries[1].key)]  # oldest first
    assert [e.key for e in cache.entries()] == [entries[2].key]
    assert sorted(os.listdir(blobs)) == sorted([entries[2].blob + ".tar.gz", "f" * 64 + ".tar.gz", "README"])
    cache.fetch(entries[2], os.path.join(str(tmp_path), "kept"))
    removed = cache.prune(0)
    assert [e.key for e in removed] == [entries[2].key] and cache.entries() == []


FULL_DISK_SCRIPT = textwrap.dedent("""
    import os, resource, signal, sys
    from ensure_flydsl.binary_cache.entries import open_cache, CacheError, CacheCorrupt
    cache_dir, key, dest, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cache = open_cache(cache_dir)
    entry = cache.lookup("tree", key)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then writes past the limit fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        cache.fetch(entry, dest)
    except CacheCorrupt as exc:
        print("corrupt:", exc)
    except CacheError as exc:
        print("error:", exc)
    else:
        print("fetched")
""")


@pytest.mark.parametrize("content", ["incompressible", "compressible"])
def test_a_full_disk_during_fetch_leaves_nothing_behind(content: str, cache_dir: str, work: str,
                                                        tmp_path: "os.PathLike[str]") -> None:
    """Incompressible: the blob copy hits the limit; compressible: a small blob, the extracted file hits it."""
    source = os.path.join(str(tmp_path), "src")
    os.makedirs(source)
    with open(os.path.join(source, "big.bin"), "wb") as handle:
        handle.write(os.urandom(2 << 20) if content == "incompressible" else bytes(2 << 20))
    entry = open_cache(cache_dir).publish("tree", KEY, FIELDS, source)
    assert (entry.size > 1 << 20) == (content == "incompressible")
    script = os.path.join(str(tmp_path), "full.py")
    write(script, FULL_DISK_SCRIPT)
    out = subprocess.run([sys.executable, script, cache_dir, KEY, os.path.join(work, "dest"), str(1 << 20)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert out.stdout.startswith("error: fetching tree entry"), out.stdout
    assert "File too large" in out.stdout and "nothing was left behind" in out.stdout
    assert os.listdir(work) == []


@pytest.fixture
def small_tmpfs(tmp_path: "os.PathLike[str]") -> Iterator[str]:
    path = os.path.join(str(tmp_path), "small")
    os.makedirs(path)
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path],
                                                   stderr=subprocess.DEVNULL, check=False).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (needs root); the RLIMIT_FSIZE test covers a full disk")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=True)


def test_a_full_tmpfs_during_fetch_leaves_nothing_behind(small_tmpfs: str, cache_dir: str,
                                                         tmp_path: "os.PathLike[str]") -> None:
    source = os.path.join(str(tmp_path), "src")
    os.makedirs(source)
    for n in range(3):
        with open(os.path.join(source, f"part{n}.bin"), "wb") as handle:
            handle.write(bytes(600 << 10))  # compresses to almost nothing; 1.8 MiB does not fit in 1 MiB
    cache = open_cache(cache_dir)
    entry = cache.publish("tree", KEY, FIELDS, source)
    with pytest.raises(CacheError) as caught:
        cache.fetch(entry, os.path.join(small_tmpfs, "dest"))
    assert not isinstance(caught.value, CacheCorrupt)
    assert "No space left on device" in str(caught.value)
    assert os.listdir(small_tmpfs) == []


# -- locations and the command line --------------------------------------------------------------------
def test_a_url_without_fsspec_says_which_extra_to_install(tmp_path: "os.PathLike[str]") -> None:
    code = ("import sys; sys.modules['fsspec'] = None\n"  # as on a bare image without the extra
            "from ensure_flydsl.binary_cache.entries import open_cache, CacheError\n"
            "try:\n    open_cache('s3://bucket/prefix')\nexcept CacheError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    assert "needs fsspec" in out.stdout and "pip install 'ensure-flydsl[s3]'" in out.stdout
    folder = subprocess.run([sys.executable, "-c", "import sys; sys.modules['fsspec'] = None\n"
                             "from ensure_flydsl.binary_cache.entries import open_cache\n"
                             f"print(open_cache({str(tmp_path)!r}).entries())"],
                            stdout=subprocess.PIPE, text=True, check=True)
    assert folder.stdout.strip() == "[]"  # a folder cache needs no extra


def cli(*args: str, env: Optional[Dict[str, str]] = None) -> "subprocess.CompletedProcess[str]":
    full = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "ensure_flydsl", "cache", *args], env=full, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, check=False)


def test_cache_list_and_prune_through_the_cli(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    empty = cli("list", "--cache", cache_dir)
    assert empty.returncode == 0 and "no entries in" in empty.stdout
    cache = open_cache(cache_dir)
    keys = []
    for n in range(2):
        fields = dict(FIELDS, commit=str(n) * 40)
        keys.append(cache_key("tree", fields))
        cache.publish("tree", keys[-1], fields, make_tree(os.path.join(str(tmp_path), f"s{n}"), seed=str(n)))
        time.sleep(0.01)
    listed = cli("list", "--cache", cache_dir)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("tree  " + keys[1][:12])  # newest first
    assert re.search(r"^tree  [0-9a-f]{12} +\d+ B  \d{4}-\d\d-\d\d \d\d:\d\d  commit=111111111111 "
                     r"abi=cpython-311-x86_64-linux-gnu platform=linux-x86_64 repo=https://", lines[0]), lines[0]
    as_json = cli("list", "--json", env={"FLYDSL_CACHE": cache_dir})
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [o["key"] for o in objects] == keys[::-1] and objects[0]["fields"]["commit"] == "1" * 40
    assert {"kind", "key", "blob", "size", "created", "files", "fields"} <= set(objects[0])
    missing = cli("prune", "--cache", cache_dir)
    assert missing.returncode == 64 and "--max-size" in missing.stderr and len(missing.stderr.splitlines()) == 1
    junk = cli("prune", "--cache", cache_dir, "--max-size", "lots")
    assert junk.returncode == 64 and "--max-size='lots' is not allowed" in junk.stderr
    pruned = cli("prune", "--cache", cache_dir, "--max-size", "1")
    assert pruned.returncode == 0, pruned.stderr
    assert "removed tree  " + keys[0][:12] in pruned.stdout and "removed tree  " + keys[1][:12] in pruned.stdout
    assert "now holds 0 entries" in pruned.stdout
    unset = cli("list")
    assert unset.returncode == 64 and "FLYDSL_CACHE (--cache) is not set" in unset.stderr
    not_a_folder = cli("list", "--cache", os.path.join(str(tmp_path), "s0", "flydsl", "tool.sh"))
    assert not_a_folder.returncode == 64 and "is not a folder" in not_a_folder.stderr


# -- S3 (moto's server, a real HTTP endpoint) ----------------------------------------------------------
@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")  # never the developer's own AWS setup
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = "flydsl-" + uuid.uuid4().hex[:12]
    s3_server.make_bucket(bucket)
    return f"s3://{bucket}/builds"


def test_s3_round_trip_miss_entries_and_prune(s3_url: str, s3_server: S3Server, work: str,
                                              tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    assert cache.lookup("tree", KEY) is None and cache.entries() == []
    source = make_tree(os.path.join(str(tmp_path), "src"))
    entry = cache.publish("tree", KEY, FIELDS, source)
    found = open_cache(s3_url).lookup("tree", KEY)
    assert found is not None and found == entry
    dest = os.path.join(work, "dest")
    cache.fetch(found, dest)
    want = snapshot(source)
    want["flydsl/shared.txt"] = ("file", 0o644, want["flydsl/shared.txt"][2])
    assert snapshot(dest) == want
    mlir_fields = {"llvm_commit": "d" * 40, "abi": "cpython-311", "platform": "linux-x86_64", "script": "e" * 64}
    mlir = cache.publish("mlir", cache_key("mlir", mlir_fields), mlir_fields, source)
    assert mlir.blob == entry.blob  # same bytes, one blob
    assert sorted(e.kind for e in cache.entries()) == ["mlir", "tree"]
    removed = cache.prune(0)
    assert sorted(e.kind for e in removed) == ["mlir", "tree"] and cache.entries() == []
    bucket = s3_url[len("s3://"):].split("/", 1)[0]
    assert s3_server.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # blobs went with their entries


def test_s3_corrupted_blob_is_rejected(s3_url: str, s3_server: S3Server, work: str,
                                       tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    entry = cache.publish("tree", KEY, FIELDS, make_tree(os.path.join(str(tmp_path), "src")))
    bucket, prefix = s3_url[len("s3://"):].split("/", 1)
    blob_key = f"{prefix}/blobs/{entry.blob}.tar.gz"
    client = s3_server.client()
    data = bytearray(client.get_object(Bucket=bucket, Key=blob_key)["Body"].read())
    data[len(data) // 2] ^= 0x01
    client.put_object(Bucket=bucket, Key=blob_key, Body=bytes(data))
    assert_rejected(open_cache(s3_url), entry, work, "blob sha256 mismatch")
    client.delete_object(Bucket=bucket, Key=blob_key)
    assert_rejected(open_cache(s3_url), entry, work, "missing from the cache")


def test_s3_cli_list_and_unreachable_endpoint(s3_url: str, s3_server: S3Server,
                                              tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(s3_url)
    cache.publish("tree", KEY, FIELDS, make_tree(os.path.join(str(tmp_path), "src")))
    listed = cli("list", "--cache", s3_url, env=s3_server.env())
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("tree  " + KEY[:12])
    dead = dict(s3_server.env(), AWS_ENDPOINT_URL_S3="http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")
    unreachable = cli("list", "--cache", s3_url, env=dead)
    assert unreachable.returncode == 64 and "cannot list entries in the cache" in unreachable.stderr


def test_a_member_before_its_folder_in_the_tar_is_rejected(cache_dir: str, work: str) -> None:
    """The manifest lists the folder first; the tar stream brings its file first: refused, not written."""
    entry = publish_raw(cache_dir, [_member("d/x", data=b"x"), _member("d", kind=tarfile.DIRTYPE)])
    honest = (Member("d", "dir", 0o755), Member("d/x", "file", 0o644, 1, hashlib.sha256(b"x").hexdigest()))
    lying = CacheEntry(entry.kind, entry.key, entry.blob, entry.size, entry.created, entry.fields, 1,
                       members=honest)
    assert_rejected(open_cache(cache_dir), lying, work, "comes before its folder")
