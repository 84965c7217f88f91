"""What the host store reads back (manifests, references, probe records) is outside data: each is taken only
when every field means what the store writes there (issue 28: a store file never steers a link by its type alone)."""

from __future__ import annotations

import json
import os
from typing import Dict, List

import pytest

from ensure_flydsl.host_store import probed, refs
from ensure_flydsl.host_store.manifest import parse, scan
from ensure_flydsl.host_store.store import HostStore, StoreProblem

KEY = "ab" * 24


def manifest(items: List[Dict[str, object]], **over: object) -> Dict[str, object]:
    data: Dict[str, object] = {"format": 1, "key": KEY, "how": "released", "commit": "c" * 40, "abi": "cpython-311",
                               "root_specific": None, "entries": items}
    data.update(over)
    return data


GOOD = [{"path": "flydsl", "kind": "dir"},
        {"path": "flydsl/__init__.py", "kind": "file", "sha256": "0" * 64, "size": 3, "executable": False},
        {"path": "flydsl/lib.so", "kind": "link", "target": "__init__.py"}]


def test_a_manifest_the_store_writes_is_read_back() -> None:
    found, why = parse(manifest(GOOD), KEY)
    assert found is not None and why == "" and [e.path for e in found.entries] == [e["path"] for e in GOOD]


@pytest.mark.parametrize("entry", [
    {"path": "../escape", "kind": "file", "sha256": "0" * 64, "size": 1, "executable": False},
    {"path": "/etc/passwd", "kind": "file", "sha256": "0" * 64, "size": 1, "executable": False},
    {"path": "flydsl/x", "kind": "file", "sha256": "XYZ", "size": 1, "executable": False},
    {"path": "flydsl/x", "kind": "file", "sha256": "0" * 64, "size": -1, "executable": False},
    {"path": "flydsl/x", "kind": "file", "sha256": "0" * 64, "size": 1, "executable": "yes"},
    {"path": "flydsl/x", "kind": "link", "target": "/etc/passwd"},
    {"path": "flydsl/x", "kind": "link", "target": "../../outside"},
    {"path": "flydsl/x", "kind": "fifo"},
    {"path": "nofolder/x", "kind": "dir"},
    {"path": "flydsl/__init__.py", "kind": "dir"},  # listed twice
])
def test_an_entry_that_means_anything_else_refuses_the_manifest(entry: Dict[str, object]) -> None:
    found, why = parse(manifest([*GOOD, entry]), KEY)
    assert found is None and why


@pytest.mark.parametrize("over", [{"key": "cd" * 24}, {"format": 2}, {"how": "stolen"}, {"commit": "xyz"},
                                  {"root_specific": "relative/root"}, {"entries": "all"}])
def test_a_field_that_means_anything_else_refuses_the_manifest(over: Dict[str, object]) -> None:
    assert parse(manifest(GOOD, **over), KEY)[0] is None


def test_a_stored_file_that_does_not_match_its_hash_is_a_problem(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "flydsl"))
    with open(os.path.join(tree, "flydsl", "__init__.py"), "w") as handle:
        handle.write("x = 1\n")
    entries, holding = scan(tree, "/nowhere")
    assert holding == []
    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    from ensure_flydsl.host_store.link import Linker

    stored, added = store.add(KEY, tree, how="built", commit="c" * 40, abi="a", root="/nowhere", linker=Linker(),
                              entries=entries, root_specific=None)
    assert added
    store.check(stored, full=True)
    path = os.path.join(store.tree_dir(KEY), "files", "flydsl", "__init__.py")
    os.chmod(path, 0o644)
    with open(path, "w") as handle:  # same size, other bytes
        handle.write("x = 2\n")
    with pytest.raises(StoreProblem, match="sha256"):
        store.check(stored)


def test_a_tree_holding_its_roots_path_is_found(tmp_path: "os.PathLike[str]") -> None:
    tree = os.path.join(str(tmp_path), "tree")
    os.makedirs(os.path.join(tree, "__pycache__"))
    with open(os.path.join(tree, "paths.txt"), "w") as handle:
        handle.write("built in /roots/a/FlyDSL/build-fly\n")
    with open(os.path.join(tree, "__pycache__", "m.pyc"), "w") as handle:
        handle.write("/roots/a/FlyDSL/m.py")  # bytecode: Python sets the path itself
    assert scan(tree, "/roots/a/FlyDSL")[1] == ["paths.txt"]


def test_a_reference_holds_a_tree_only_while_its_root_says_so(tmp_path: "os.PathLike[str]") -> None:
    store = str(tmp_path / "store")
    HostStore.open(store)
    root = str(tmp_path / "root")
    os.makedirs(os.path.join(root, ".ensure_flydsl"))
    refs.hold(store, root, KEY, "hardlink")
    assert refs.in_use(store) == {KEY: [root]}
    with open(os.path.join(root, ".ensure_flydsl", "store.json"), "w") as handle:
        json.dump({"store": str(tmp_path / "other-store"), "tree": KEY, "link_mode": "hardlink"}, handle)
    assert refs.in_use(store) == {}
    with open(os.path.join(root, ".ensure_flydsl", "store.json"), "w") as handle:
        json.dump({"store": store, "tree": KEY, "link_mode": "symlink"}, handle)  # no mode the store uses
    assert refs.in_use(store) == {}
    assert refs.drop_stale(store) == [root] and refs.references(store) == []


def test_a_probe_record_naming_a_file_outside_the_root_is_no_answer(tmp_path: "os.PathLike[str]") -> None:
    tree = str(tmp_path)
    fingerprint: Dict[str, object] = {"interpreter": {"real": "/usr/bin/python3"}}
    probed.remember(tree, fingerprint, "0.2.2", {"flydsl": "build-fly/python_packages/flydsl/__init__.py"})
    found = probed.passed(tree, fingerprint, ["flydsl"])
    assert found is not None and found.version == "0.2.2"
    assert probed.passed(tree, {"interpreter": {"real": "/other"}}, ["flydsl"]) is None
    probed.remember(tree, fingerprint, "0.2.2", {"flydsl": "../../elsewhere/flydsl/__init__.py"})
    assert probed.passed(tree, fingerprint, ["flydsl"]) is None
