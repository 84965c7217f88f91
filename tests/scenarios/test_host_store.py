"""The host store (issue 28): a second root of the same pin and interpreter links the first root's tree
instead of building it; a pin switched back comes from the store; no root changes another through it; bad
store settings are refused or gone without; a damaged stored file is never linked."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Dict

from ensure_flydsl.result import GATE_STRINGS, RESULT_KEYS
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.helpers.workspace import Workspace


def root_of(tmp: str, repo: FixtureRepo, name: str, store: str, **env: str) -> Workspace:
    """Another root on this host: its own base folder, the host's store and build counters."""
    ws = Workspace(os.path.join(tmp, name, "base"), repo)
    ws.counter = os.path.join(tmp, "counters")
    os.makedirs(ws.counter, exist_ok=True)
    ws.env.update({"FLYDSL_STORE": store, "FIXTURE_COUNTER_DIR": ws.counter})
    ws.env.update(env)
    return ws


def packaged(ws: Workspace, rel: str = "flydsl/__init__.py") -> str:
    return os.path.join(ws.root, "build-fly", "python_packages", rel)


def trees(store: str) -> Dict[str, Dict[str, object]]:
    folder = os.path.join(store, "trees")
    found = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if not name.startswith("."):
            with open(os.path.join(folder, name, "manifest.json")) as handle:
                found[name] = json.load(handle)
    return found


def test_a_second_root_links_the_tree_and_skips_the_probe(tmp_path: "os.PathLike[str]",
                                                          fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    first = ensure_json(a)
    assert first["how"] == "built" and first["link_mode"] == "hardlink", first["_stderr"]
    assert a.count("build") == 1
    assert "store: kept the tree" in str(first["_stderr"])
    assert len(trees(store)) == 1
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    second = ensure_json(b)
    assert second["how"] == "built" and second["link_mode"] == "hardlink", second["_stderr"]
    assert a.count("build") == 1, "the second root built nothing"
    said = str(second["_stderr"])
    assert "store: linked the built tree" in said and "store: not probed again" in said
    assert "verify" not in second["durations"]  # type: ignore[operator]
    assert os.stat(packaged(a)).st_ino == os.stat(packaged(b)).st_ino
    assert_one_tree(b)
    assert ensure_json(b)["action"] == "warm"
    verified = ensure_json(b, "--verify")  # --verify always probes, and hashes the linked files
    assert verified["action"] == "verified" and "probe" in verified["durations"]  # type: ignore[operator]


def test_a_warm_answer_says_the_link_mode_of_the_cold_run(tmp_path: "os.PathLike[str]",
                                                           fixture_repo: FixtureRepo) -> None:
    """The env file's twin keeps how the store gave the root its tree: the warm answer says what the cold one
    said (it said null before), and a twin naming a way the store has not reads as not recorded."""
    store = os.path.join(str(tmp_path), "store")
    for name in ("a", "b"):  # a keeps its tree in the store, b links it from there
        ws = root_of(str(tmp_path), fixture_repo, name, store)
        cold = ensure_json(ws)
        warm = ensure_json(ws)
        assert cold["link_mode"] == "hardlink", cold["_stderr"]
        assert warm["action"] == "warm" and warm["link_mode"] == cold["link_mode"]
        with open(ws.env_json) as handle:
            twin = json.load(handle)
        assert twin["link_mode"] == "hardlink"
        with open(ws.env_json, "w") as handle:
            json.dump(dict(twin, link_mode="symlink"), handle)
        forged = ensure_json(ws)
        assert forged["action"] == "warm" and forged["link_mode"] is None


def test_a_pin_switched_back_comes_from_the_store(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    assert ensure_json(a)["how"] == "built"
    assert ensure_json(a, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")["commit"] != fixture_repo.commits["dev"]
    assert a.count("build") == 2
    back = ensure_json(a, FLYDSL_EXACT_PIN="1")
    assert back["commit"] == fixture_repo.commits["dev"] and back["link_mode"] == "hardlink"
    assert a.count("build") == 2, "A came back from the store, not from a build"
    said = str(back["_stderr"])
    assert "store: linked the built tree" in said and "store: not probed again" in said
    assert "requirements: not checked" in said
    assert_one_tree(a)


def test_an_edit_through_a_hardlink_is_caught_and_repaired(tmp_path: "os.PathLike[str]",
                                                          fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    ensure_json(a)
    ensure_json(b)
    with open(packaged(b), "rb") as handle:
        original = handle.read()
    with open(packaged(b), "ab") as handle:  # in place: the file is a's too (root may write a read-only file)
        handle.write(b"\nEDITED = True\n")
    again = ensure_json(a)  # a's warm fingerprint sees the change; the full run finds the file is not the store's
    assert again["action"] == "provisioned", again["_stderr"]
    said = str(again["_stderr"])
    assert "linked from the store's tree" in said and "provisioned again" in said, said
    with open(packaged(a), "rb") as handle:
        assert handle.read() == original
    assert os.stat(packaged(a)).st_ino != os.stat(packaged(b)).st_ino
    verified = b.run("--json", "--verify")  # b still has the edit: --verify hashes it against the store's tree
    assert verified.returncode == 0, verified.stderr
    assert json.loads(verified.stdout)["action"] == "provisioned"
    with open(packaged(b), "rb") as handle:
        assert handle.read() == original
    assert a.count("build") == 2  # the damaged stored tree went; a built, b linked a's new one


def test_prune_never_removes_a_tree_a_root_uses(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    ensure_json(a)
    ensure_json(b, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    ensure_json(a, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")  # the dev tree is used by no root now
    listed = a.run("store", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    # The one shape of every JSON answer (GEAK's string keys left out rather than null).
    assert set(RESULT_KEYS) - set(GATE_STRINGS) <= set(answer) and answer["ok"] is True
    found = {t["commit"]: t for t in answer["trees"]}
    assert sorted(found[str(ensure_json(b)["commit"])]["used_by"]) == sorted([a.root, b.root])
    assert found[fixture_repo.commits["dev"]]["used_by"] == []
    pruned = a.run("store", "prune", "--max-size", "0")
    assert pruned.returncode == 0, pruned.stderr
    left = [t["commit"] for t in json.loads(a.run("store", "list", "--json").stdout)["trees"]]
    assert left == [ensure_json(b)["commit"]]
    assert ensure_json(b)["action"] == "warm"
    bad = a.run("store", "prune")
    assert bad.returncode == 64 and len(bad.stderr.strip().splitlines()) == 1 and "--max-size" in bad.stderr


def test_an_unusable_store_setting_is_refused_before_anything(tmp_path: "os.PathLike[str]",
                                                               fixture_repo: FixtureRepo) -> None:
    blocker = os.path.join(str(tmp_path), "a-file")
    with open(blocker, "w") as handle:
        handle.write("not a folder\n")
    a = root_of(str(tmp_path), fixture_repo, "a", os.path.join(blocker, "store"))
    out = a.run()
    assert out.returncode == 64, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "FLYDSL_STORE" in lines[0] and "is a file" in lines[0], out.stderr
    assert not os.path.exists(a.root) and a.count("build") == 0


def test_an_unusable_default_store_is_gone_without_said_once(tmp_path: "os.PathLike[str]",
                                                              fixture_repo: FixtureRepo) -> None:
    a = root_of(str(tmp_path), fixture_repo, "a", "")
    del a.env["FLYDSL_STORE"]
    os.makedirs(a.host_dir, exist_ok=True)
    with open(os.path.join(a.host_dir, "store"), "w") as handle:
        handle.write("a file where the default store would be\n")
    result = ensure_json(a)
    assert result["how"] == "built" and result["link_mode"] is None
    said = [line for line in str(result["_stderr"]).splitlines() if line.startswith("store:")]
    assert len(said) == 1 and "going on without a store" in said[0], said
    assert f"the default host store {os.path.join(a.host_dir, 'store')}" in said[0]
    assert_one_tree(a)


def test_a_damaged_stored_file_is_never_linked(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a)
    (key,) = trees(store)
    stored = os.path.join(store, "trees", key, "files", "flydsl", "__init__.py")
    with open(stored, "rb") as handle:
        data = handle.read()
    planted = stored + ".planted"
    with open(planted, "wb") as handle:  # a new file at the name: a's own (hardlinked) file is not changed
        handle.write(data.replace(b"__version__", b"__versioN__"))
    os.rename(planted, stored)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    result = ensure_json(b)
    said = str(result["_stderr"])
    assert "is damaged" in said and "does not match its sha256" in said, said
    assert result["how"] == "built" and b.count("build") == 2
    assert_one_tree(b)
    assert ensure_json(a)["action"] == "warm"  # a's own files were never the planted one


def test_two_roots_at_once_share_one_stored_tree(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    roots = [root_of(str(tmp_path), fixture_repo, name, store) for name in ("a", "b", "c")]
    procs = [ws.popen("--json") for ws in roots]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert len(trees(store)) == 1
    for ws in roots:
        assert_one_tree(ws)
    listed = json.loads(roots[0].run("store", "list", "--json").stdout)["trees"]
    assert sorted(listed[0]["used_by"]) == sorted(ws.root for ws in roots if json.loads(
        open(os.path.join(ws.root, ".ensure_flydsl", "store.json")).read())["tree"] == listed[0]["key"])


def test_a_store_on_another_file_system_copies_and_says_so(tmp_path: "os.PathLike[str]",
                                                          fixture_repo: FixtureRepo) -> None:
    from tests.helpers.reliability import tmpfs

    with tmpfs(os.path.join(str(tmp_path), "store"), "64m") as store:
        a = root_of(str(tmp_path), fixture_repo, "a", store)
        first = ensure_json(a)
        assert first["link_mode"] == "copy"
        assert "is on another file system than" in str(first["_stderr"])
        b = root_of(str(tmp_path), fixture_repo, "b", store)
        second = ensure_json(b)
        assert second["link_mode"] == "copy" and b.count("build") == 1
        said = [line for line in str(second["_stderr"]).splitlines() if "another file system" in line]
        assert len(said) == 1
        assert_one_tree(b)


def test_a_file_deleted_from_a_linked_tree_comes_back_from_the_store(tmp_path: "os.PathLike[str]",
                                                                     fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a)
    os.unlink(packaged(a, "flydsl/_mlir/_mlir_libs/_mlir.py"))  # the root's link goes; the store keeps its file
    repaired = ensure_json(a)
    said = str(repaired["_stderr"])
    assert repaired["action"] == "provisioned" and "is missing" in said and "store: linked" in said, said
    assert a.count("build") == 1
    assert_one_tree(a)


def test_a_second_root_fetches_no_git_object_the_host_has(tmp_path: "os.PathLike[str]",
                                                          fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    said = str(ensure_json(b)["_stderr"])
    assert "borrows the host's git objects" in said
    with open(os.path.join(b.root, ".git", "objects", "info", "alternates")) as handle:
        assert handle.read().split() == [os.path.join(store, "git", "objects")]
    counted = subprocess.run(["git", "-C", b.root, "count-objects", "-v"], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
    assert "count: 0" in counted and "packs: 0" in counted, counted  # every object came through the alternate
    assert_one_tree(b)


def test_a_released_tree_is_linked_with_no_download_and_no_unpack(tmp_path: "os.PathLike[str]",
                                                                  release_repo: FixtureRepo, wheelhouse: str) -> None:
    store = os.path.join(str(tmp_path), "store")
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "auto", "FLYDSL_PIN": "v0.2.2"}
    a = root_of(str(tmp_path), release_repo, "a", store, **offline)
    first = ensure_json(a)
    assert first["how"] == "released" and first["link_mode"] == "hardlink", first["_stderr"]
    b = root_of(str(tmp_path), release_repo, "b", store, **offline)
    second = ensure_json(b)
    said = str(second["_stderr"])
    assert second["how"] == "released" and second["link_mode"] == "hardlink", said
    assert "downloading" not in said and "installing" not in said and "store: not probed again" in said
    assert set(second["durations"]) & {"release", "verify"} == set()  # type: ignore[arg-type]
    assert_one_tree(b)
