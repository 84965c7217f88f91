"""What the store's local tier reads back (manifests, seals, probe records, its folders) is outside data: each is
taken only when every field means what the tier writes there (issue 28: a file never steers a copy by its type
alone), and only from this user's own files (issue 42); prune removes only what the tier made."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Dict, List, Tuple

import pytest

from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.local import HostStore, Placer, store_problem
from ensure_flydsl.trees.manifest import CacheEntry, Member, cache_key, hashed_members

FIELDS: Dict[str, object] = {"repo": "r", "commit": "c" * 40, "abi": "cpython-311", "platform": "linux",
                             "origin": "release", "made_from": "0.2.2", "root": None}
KEY = cache_key("tree", FIELDS)


def manifest(items: List[Dict[str, object]], **over: object) -> Dict[str, object]:
    data: Dict[str, object] = {"format": 1, "kind": "tree", "key": KEY, "fields": FIELDS, "blob": "", "size": 3,
                               "created": 1.0, "host": "h", "tool": "t", "how": "released", "members": items}
    data.update(over)
    return data


GOOD = [{"path": "flydsl", "type": "dir", "mode": 0o755, "size": 0},
        {"path": "flydsl/__init__.py", "type": "file", "mode": 0o644, "size": 3, "sha256": "0" * 64},
        {"path": "flydsl/lib.so", "type": "symlink", "mode": 0o777, "size": 0, "target": "__init__.py"}]


def planted(tmp_path: "os.PathLike[str]", data: Dict[str, object]) -> HostStore:
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    os.makedirs(os.path.join(store.tree_dir(KEY), "files"))
    with open(os.path.join(store.tree_dir(KEY), "manifest.json"), "w") as handle:
        json.dump(data, handle)
    return store


def put(store: HostStore, tree: str) -> Tuple[CacheEntry, bool]:
    members, _ = hashed_members(tree)
    return store.put(KEY, FIELDS, tree, members, how="built", signed_by=(), refuses=lambda _: None, placer=Placer())


def small_tree(tmp_path: "os.PathLike[str]") -> str:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "flydsl"))
    with open(os.path.join(tree, "flydsl", "__init__.py"), "w") as handle:
        handle.write("x = 1\n")
    return tree


def test_a_manifest_the_tier_writes_is_read_back(tmp_path: "os.PathLike[str]") -> None:
    found, why = planted(tmp_path, manifest(GOOD)).lookup(KEY)
    assert found is not None and why == "" and [m.path for m in found.members] == [m["path"] for m in GOOD]


@pytest.mark.parametrize("member", [
    {"path": "../escape", "type": "file", "mode": 0o644, "size": 1, "sha256": "0" * 64},
    {"path": "/etc/passwd", "type": "file", "mode": 0o644, "size": 1, "sha256": "0" * 64},
    {"path": "flydsl/x", "type": "file", "mode": 0o644, "size": 1, "sha256": "XYZ"},
    {"path": "flydsl/x", "type": "file", "mode": 0o644, "size": -1, "sha256": "0" * 64},
    {"path": "flydsl/x", "type": "file", "mode": 0o644, "size": 10**400, "sha256": "0" * 64},  # issue 42, item 9
    {"path": "flydsl/x", "type": "file", "mode": "rw", "size": 1, "sha256": "0" * 64},
    {"path": "flydsl/x", "type": "symlink", "mode": 0o777, "size": 0, "target": "/etc/passwd"},
    {"path": "flydsl/x", "type": "symlink", "mode": 0o777, "size": 0, "target": "../../outside"},
    {"path": "flydsl/x", "type": "fifo", "mode": 0o644, "size": 0},
    {"path": "nofolder/x", "type": "dir", "mode": 0o755, "size": 0},
    {"path": "flydsl/__init__.py", "type": "dir", "mode": 0o755, "size": 0},  # listed twice
])
def test_a_member_that_means_anything_else_refuses_the_manifest(tmp_path: "os.PathLike[str]",
                                                              member: Dict[str, object]) -> None:
    found, why = planted(tmp_path, manifest([*GOOD, member])).lookup(KEY)
    assert found is None and why


@pytest.mark.parametrize("over", [{"key": "cd" * 32}, {"format": 2}, {"how": "stolen"}, {"blob": "0" * 64},
                                  {"fields": dict(FIELDS, commit="xyz")}, {"members": "all"}, {"created": -1},
                                  {"size": 10**400}, {"signed_by": "k1"}, {"signed_by": ["k1\n"]}])
def test_a_field_that_means_anything_else_refuses_the_manifest(tmp_path: "os.PathLike[str]",
                                                             over: Dict[str, object]) -> None:
    assert planted(tmp_path, manifest(GOOD, **over)).lookup(KEY)[0] is None


def test_a_tree_of_an_older_version_is_never_linked_and_is_pruned_first(tmp_path: "os.PathLike[str]") -> None:
    """The tier's manifests before the one format (``entries`` of ``kind``s) are cleanly ignored."""
    old = {"format": 1, "key": KEY, "how": "released", "commit": "c" * 40, "abi": "a", "root_specific": None,
           "entries": [{"path": "flydsl", "kind": "dir"}]}
    store = planted(tmp_path, old)
    found, why = store.lookup(KEY)
    assert found is None and why
    assert [t.key for t in store.entries() if t.problem] == [KEY]
    assert [t.key for t in store.prune(10**12)] == [KEY] and store.entries() == []


def test_a_stored_file_that_does_not_match_its_hash_is_a_problem(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "flydsl"))
    with open(os.path.join(tree, "flydsl", "__init__.py"), "w") as handle:
        handle.write("x = 1\n")
    assert hashed_members(tree, b"/nowhere/")[1] == []
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    stored, added = put(store, tree)
    assert added and store.lookup(KEY)[0] == stored
    store.check(stored, full=True)
    path = os.path.join(store.tree_dir(KEY), "files", "flydsl", "__init__.py")
    os.chmod(path, 0o644)
    with open(path, "w") as handle:  # same size, other bytes
        handle.write("x = 2\n")
    with pytest.raises(CacheCorrupt, match="sha256"):
        store.check(stored)


def test_a_tree_whose_link_leaves_it_is_refused_at_the_door(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "flydsl"))
    os.symlink("../../elsewhere", os.path.join(tree, "flydsl", "out"))
    members, _ = hashed_members(tree)
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    with pytest.raises(Exception, match="resolves outside"):
        store.put(KEY, FIELDS, tree, members, how="built", signed_by=(), refuses=lambda _: None, placer=Placer())
    assert store.entries() == []


def test_a_tree_holding_its_roots_path_is_found(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "__pycache__"))
    with open(os.path.join(tree, "paths.txt"), "w") as handle:
        handle.write("built in /roots/a/FlyDSL/build-fly\n")
    with open(os.path.join(tree, "__pycache__", "m.pyc"), "w") as handle:
        handle.write("/roots/a/FlyDSL/m.py")  # bytecode: Python sets the path itself
    assert hashed_members(tree, b"/roots/a/FlyDSL/")[1] == ["paths.txt"]


def test_an_edit_with_its_mtime_put_back_is_still_seen(tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 2: the seal was (inode, size, mtime), so a same-size edit in place with its mtime put back
    was copied into new roots unhashed; the ctime, which no user can set, is in the seal now."""
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    stored, _ = put(store, small_tree(tmp_path))
    path = os.path.join(store.tree_dir(KEY), "files", "flydsl", "__init__.py")
    before = os.stat(path)
    os.chmod(path, 0o644)
    with open(path, "r+") as handle:
        handle.write("x = 2\n")
    os.chmod(path, 0o444)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    with pytest.raises(CacheCorrupt, match="sha256"):
        store.check(stored)


def test_a_root_s_copy_is_its_own(tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 2: what a root does to its files (bytecode included) never reaches the store or another root."""
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    stored, _ = put(store, small_tree(tmp_path))
    roots = [os.path.join(str(tmp_path), name) for name in ("a", "b")]
    for root in roots:
        store.get(stored, root, Placer())
    with open(os.path.join(roots[1], "flydsl", "__init__.py"), "r+") as handle:  # in place
        handle.write("x = 3\n")
    with open(os.path.join(roots[0], "flydsl", "__init__.py")) as handle:
        assert handle.read() == "x = 1\n"
    store.check(stored, full=True)
    assert len({os.stat(os.path.join(r, "flydsl", "__init__.py")).st_ino for r in roots}) == 2


def test_prune_removes_only_what_the_tier_made(tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 4: a user's folder or file under trees/ (named as a key or not) is left with one line; a
    killed run's staging folders (a prune's ``.staging-gone-*`` too) go at once."""
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    put(store, small_tree(tmp_path))
    trees = os.path.dirname(store.tree_dir(KEY))
    mine = [os.path.join(trees, "my-notes"), os.path.join(trees, "ab" * 32)]
    for folder in mine:
        os.makedirs(folder)
        with open(os.path.join(folder, "keep.txt"), "w") as handle:
            handle.write("mine\n")
    with open(os.path.join(trees, "README"), "w") as handle:
        handle.write("mine too\n")
    killed = [os.path.join(trees, ".staging-gone-1234abcd"), os.path.join(trees, ".staging-99-0a0b0c0d")]
    for folder in killed:
        os.makedirs(os.path.join(folder, "files"))
    removed, left = store.prune(0), store.warnings
    assert [t.key for t in removed] == [KEY]
    assert sorted(os.listdir(trees)) == sorted(["README", "ab" * 32, "my-notes"])
    assert len(left) == 3 and all("so this tool did not make it" in line for line in left), left
    assert store.entries() == []


def test_a_tree_another_user_owns_is_never_read_nor_removed(tmp_path: "os.PathLike[str]") -> None:
    """Issue 42, item 1: a tree folder of another user's in this user's store is not used, and stays."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to nobody needs root")
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    put(store, small_tree(tmp_path))
    subprocess.run(["chown", "-R", "nobody", store.tree_dir(KEY)], check=True)
    found, why = store.lookup(KEY)
    assert found is None and "not to this user" in why
    assert store.remove(KEY) is not None and os.path.isdir(store.tree_dir(KEY))
    removed, left = store.prune(0), store.warnings
    assert removed == [] and len(left) == 1 and os.path.isdir(store.tree_dir(KEY))


@pytest.mark.parametrize("what", ["fifo", "symlink", "folder"])
def test_anything_but_a_file_at_the_lock_s_name_is_refused(tmp_path: "os.PathLike[str]", what: str) -> None:
    """Issue 42, item 3: a FIFO there hung every command; a symlink gave exit 70."""
    path = os.path.join(str(tmp_path), "store")
    os.makedirs(path)
    lock = os.path.join(path, "store.lock")
    {"fifo": os.mkfifo, "folder": os.mkdir, "symlink": lambda p: os.symlink("/etc/passwd", p)}[what](lock)
    problem = store_problem(path)
    assert problem is not None and problem.startswith(f"its lock {lock}: ")
    with pytest.raises(PermissionError):
        HostStore.open(path)


def test_a_probe_record_naming_a_file_outside_the_root_is_no_answer(tmp_path: "os.PathLike[str]") -> None:
    store = HostStore.open(str(tmp_path / "store"))
    os.makedirs(store.tree_dir(KEY))
    fingerprint: Dict[str, object] = {"interpreter": {"real": "/usr/bin/python3"}}
    store.remember(KEY, fingerprint, "0.2.2", {"flydsl": "build-fly/python_packages/flydsl/__init__.py"})
    found = store.passed(KEY, fingerprint, ["flydsl"])
    assert found is not None and found.version == "0.2.2"
    assert store.passed(KEY, {"interpreter": {"real": "/other"}}, ["flydsl"]) is None
    store.remember(KEY, fingerprint, "0.2.2", {"flydsl": "../../elsewhere/flydsl/__init__.py"})
    assert store.passed(KEY, fingerprint, ["flydsl"]) is None


def test_members_are_the_one_format() -> None:
    want = Member(path="flydsl/__init__.py", type="file", mode=0o644, size=3, sha256="0" * 64)
    assert Member.from_json(GOOD[1]) == want
