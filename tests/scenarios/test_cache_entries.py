"""The binary cache's entries: keys and sizes, a round trip through a folder cache, misses, bad arguments,
trees a fetch would refuse, and pruning."""

from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from ensure_flydsl.support.space import parse_size, size_text
from ensure_flydsl.trees.backends import CacheError
from ensure_flydsl.trees.manifest import cache_key
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.cache_entries import FIELDS, KEY, blob_file, manifest_file
from tests.helpers.cache_trees import make_tree, published, snapshot, write


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
    assert [size_text(n) for n in (0, 1023, 1536, 270 * 1024**2, 3 * 1024**4)] == \
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
    cache.get(found, dest)
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
    manifest = open(manifest_file(cache_dir), "rb").read()
    again = cache.put("tree", KEY, FIELDS, source)
    assert again.entry.blob == entry.blob  # deterministic: same folder, same bytes, one blob
    assert os.listdir(os.path.join(cache_dir, "blobs")) == [entry.blob + ".tar.gz"]
    assert not again.written and "a publish never replaces one" in again.why  # the first manifest stays
    assert open(manifest_file(cache_dir), "rb").read() == manifest
    with pytest.raises(CacheError, match="already exists"):
        cache.get(found, dest)


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
    repaired = cache.put("tree", KEY, FIELDS, _source)  # the next publish replaces it: nobody can trust it
    assert repaired.written and "which was not a manifest of this key" in repaired.note
    assert open_cache(cache_dir).lookup("tree", KEY) == repaired.entry and repaired.entry.blob == entry.blob
    other = cache_key("tree", dict(FIELDS, commit="b" * 40))
    os.rename(manifest_file(cache_dir), manifest_file(cache_dir, key=other))  # a manifest under a foreign name
    moved = open_cache(cache_dir)
    assert moved.lookup("tree", other) is None and "describes tree/" in moved.warnings[0]


def test_bad_arguments(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    source = make_tree(os.path.join(str(tmp_path), "src"))
    with pytest.raises(ValueError, match="is not cache_key"):
        cache.put("tree", "0" * 64, FIELDS, source)
    with pytest.raises(ValueError, match="kind"):
        cache.lookup("../x", KEY)
    with pytest.raises(ValueError, match="sha256"):
        cache.lookup("tree", "../../etc/passwd")
    with pytest.raises(CacheError, match="not a folder"):
        cache.put("tree", KEY, FIELDS, os.path.join(source, "flydsl", "tool.sh"))
    with pytest.raises(CacheError, match="not a folder"):
        open_cache(os.path.join(source, "flydsl", "tool.sh"))


def test_publish_refuses_trees_a_fetch_would_refuse(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    source = make_tree(os.path.join(str(tmp_path), "src"))
    link = os.path.join(source, "flydsl", "etc")
    os.symlink("/etc", link)
    with pytest.raises(CacheError, match="points to the absolute path '/etc'"):
        cache.put("tree", KEY, FIELDS, source)
    os.unlink(link)
    os.symlink("../../outside", link)
    with pytest.raises(CacheError, match="resolves outside"):
        cache.put("tree", KEY, FIELDS, source)
    os.unlink(link)
    os.mkfifo(os.path.join(source, "pipe"))
    with pytest.raises(CacheError, match="not a regular file, folder or symlink"):
        cache.put("tree", KEY, FIELDS, source)
    assert not os.path.exists(cache_dir)  # refused before anything was uploaded


def test_prune_by_size_keeps_the_newest_and_removes_orphans(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    cache = open_cache(cache_dir)
    entries = []
    for n in range(3):
        fields = dict(FIELDS, commit=str(n) * 40)
        source = make_tree(os.path.join(str(tmp_path), f"src{n}"), seed=str(n), big=256 << 10)
        entries.append(cache.put("tree", cache_key("tree", fields), fields, source).entry)
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
    # A publisher killed while writing its manifest leaves the staged copy: old, it goes too; fresh, it stays.
    staged_old, staged_new = (os.path.join(cache_dir, "entries", "tree", f".{entries[0].key}.json.{n}.tmp")
                              for n in ("k9", "live"))
    for path in (staged_old, staged_new):
        write(path, "{half")
    os.utime(staged_old, (week_ago, week_ago))
    removed = cache.prune(10 << 30)  # nothing over the limit: only what no manifest names, once old
    assert sorted(str(e.fields["path"]) for e in removed) == [
        "blobs/.upload.x.tmp", "blobs/" + "e" * 64 + ".tar.gz", f"entries/tree/.{entries[0].key}.json.k9.tmp"]
    assert os.path.exists(staged_new)
    assert {e.kind for e in removed} == {"orphan"} and len(cache.entries()) == 3
    removed = cache.prune(entries[2].size)
    kinds = [(e.kind, e.key) for e in removed if e.kind != "orphan"]
    assert kinds == [("tree", entries[0].key), ("tree", entries[1].key)]  # oldest first
    assert [e.key for e in cache.entries()] == [entries[2].key]
    assert sorted(os.listdir(blobs)) == sorted([entries[2].blob + ".tar.gz", "f" * 64 + ".tar.gz", "README"])
    cache.get(entries[2], os.path.join(str(tmp_path), "kept"))
    removed = cache.prune(0)
    assert [e.key for e in removed] == [entries[2].key] and cache.entries() == []
