"""What the store's local tier reads back (manifests, references, probe records) is outside data: each is taken
only when every field means what the tier writes there (issue 28: a file never steers a link by its type alone)."""

from __future__ import annotations

import json
import os
from typing import Dict, List

import pytest

from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.local import HostStore, Linker
from ensure_flydsl.trees.manifest import Member, cache_key, hashed_members

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


def test_a_manifest_the_tier_writes_is_read_back(tmp_path: "os.PathLike[str]") -> None:
    found, why = planted(tmp_path, manifest(GOOD)).lookup(KEY)
    assert found is not None and why == "" and [m.path for m in found.members] == [m["path"] for m in GOOD]


@pytest.mark.parametrize("member", [
    {"path": "../escape", "type": "file", "mode": 0o644, "size": 1, "sha256": "0" * 64},
    {"path": "/etc/passwd", "type": "file", "mode": 0o644, "size": 1, "sha256": "0" * 64},
    {"path": "flydsl/x", "type": "file", "mode": 0o644, "size": 1, "sha256": "XYZ"},
    {"path": "flydsl/x", "type": "file", "mode": 0o644, "size": -1, "sha256": "0" * 64},
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
                                  {"fields": dict(FIELDS, commit="xyz")}, {"members": "all"}, {"created": -1}])
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
    assert [t.key for t in store.list() if t.problem] == [KEY]
    assert [t.key for t in store.prune(10**12)] == [KEY] and store.keys() == []


def test_a_stored_file_that_does_not_match_its_hash_is_a_problem(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "flydsl"))
    with open(os.path.join(tree, "flydsl", "__init__.py"), "w") as handle:
        handle.write("x = 1\n")
    members, holding = hashed_members(tree, b"/nowhere/")
    assert holding == []
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    stored, added = store.put(KEY, FIELDS, tree, members, how="built", linker=Linker())
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
        store.put(KEY, FIELDS, tree, members, how="built", linker=Linker())
    assert store.keys() == []


def test_a_tree_holding_its_roots_path_is_found(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "__pycache__"))
    with open(os.path.join(tree, "paths.txt"), "w") as handle:
        handle.write("built in /roots/a/FlyDSL/build-fly\n")
    with open(os.path.join(tree, "__pycache__", "m.pyc"), "w") as handle:
        handle.write("/roots/a/FlyDSL/m.py")  # bytecode: Python sets the path itself
    assert hashed_members(tree, b"/roots/a/FlyDSL/")[1] == ["paths.txt"]


def test_a_reference_holds_a_tree_only_while_its_root_says_so(tmp_path: "os.PathLike[str]") -> None:
    store = HostStore.open(str(tmp_path / "store"))
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, ".ensure_flydsl"))
    store.hold(root, KEY, "hardlink")
    assert store.in_use() == {KEY: [root]}
    with open(os.path.join(root, ".ensure_flydsl", "store.json"), "w") as handle:
        json.dump({"store": str(tmp_path / "other-store"), "tree": KEY, "link_mode": "hardlink"}, handle)
    assert store.in_use() == {}
    with open(os.path.join(root, ".ensure_flydsl", "store.json"), "w") as handle:
        json.dump({"store": store.path, "tree": KEY, "link_mode": "symlink"}, handle)  # no mode the tier uses
    assert store.in_use() == {}
    store.prune(10**12)
    assert store.references() == []


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
