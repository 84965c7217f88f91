"""The host store (issue 28): a second root of the same pin and interpreter copies the first root's tree
instead of building it; a pin switched back comes from the store; no root changes another through it (issue 42:
copies, never hardlinks); bad store settings are refused or gone without; a damaged stored file is never copied;
only this user's own store is used; its locks are bounded; prune removes only what the tool made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict

import pytest

from ensure_flydsl.result import GATE_STRINGS, LINK_MODES, RESULT_KEYS
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


def test_a_second_root_copies_the_tree_and_skips_the_probe(tmp_path: "os.PathLike[str]",
                                                           fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    first = ensure_json(a)
    assert first["how"] == "built" and first["link_mode"] is None, first["_stderr"]  # its own tree
    assert a.count("build") == 1
    assert "store: kept a copy of the tree" in str(first["_stderr"])
    assert len(trees(store)) == 1
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    second = ensure_json(b)
    assert second["how"] == "built" and second["link_mode"] in LINK_MODES, second["_stderr"]
    assert a.count("build") == 1, "the second root built nothing"
    said = str(second["_stderr"])
    assert "store: copied the built tree" in said and "store: not probed again" in said
    assert "verify" not in second["durations"]  # type: ignore[operator]
    stored = os.path.join(store, "trees", *trees(store), "files", "flydsl", "__init__.py")
    assert len({os.stat(path).st_ino for path in (packaged(a), packaged(b), stored)}) == 3  # each its own file
    assert_one_tree(b)
    assert ensure_json(b)["action"] == "warm"
    verified = ensure_json(b, "--verify")  # --verify always probes, and hashes the linked files
    assert verified["action"] == "verified" and "probe" in verified["durations"]  # type: ignore[operator]


def test_a_warm_answer_says_the_link_mode_of_the_cold_run(tmp_path: "os.PathLike[str]",
                                                           fixture_repo: FixtureRepo) -> None:
    """The env file's twin keeps how the store gave the root its tree: the warm answer says what the cold one
    said (it said null before), and a twin naming a way the store has not reads as not recorded."""
    store = os.path.join(str(tmp_path), "store")
    for name in ("a", "b"):  # a keeps a copy of its tree in the store, b copies it from there
        ws = root_of(str(tmp_path), fixture_repo, name, store)
        cold = ensure_json(ws)
        warm = ensure_json(ws)
        assert cold["link_mode"] == (None if name == "a" else "copy"), cold["_stderr"]  # no reflink here
        assert warm["action"] == "warm" and warm["link_mode"] == cold["link_mode"]
        with open(ws.env_json) as handle:
            twin = json.load(handle)
        assert twin["link_mode"] == cold["link_mode"]
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
    assert back["commit"] == fixture_repo.commits["dev"] and back["link_mode"] == "copy"
    assert a.count("build") == 2, "A came back from the store, not from a build"
    said = str(back["_stderr"])
    assert "store: copied the built tree" in said and "store: not probed again" in said
    assert "requirements: not checked" in said
    assert_one_tree(a)


def test_an_edit_in_one_root_never_reaches_another(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """Issue 42, item 2: with hardlinks an in-place edit of a file (a .pyc too) in root B was root A's, and A's
    warm call answered 0 with it; each root has its own files now, and the store keeps what it recorded."""
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    ensure_json(a)
    ensure_json(b)
    edited = [packaged(b)] + [os.path.join(folder, name) for folder, _, names in os.walk(packaged(b, ""))
                              for name in names if name.endswith(".pyc")][:1]
    originals = {}
    for path in edited:
        twin = path.replace(b.root, a.root)
        with open(twin, "rb") as handle:
            originals[twin] = handle.read()
        with open(path, "r+b") as handle:  # in place, the same size
            handle.write(b"#" * min(8, len(originals[twin])))
    assert ensure_json(a)["action"] == "warm"
    for path, data in originals.items():
        with open(path, "rb") as handle:
            assert handle.read() == data, path
    c = root_of(str(tmp_path), fixture_repo, "c", store)
    # --verify hashes every stored file before the copy: the store kept what it recorded
    assert ensure_json(c, "--verify")["action"] == "provisioned" and a.count("build") == 1
    with open(packaged(c), "rb") as handle:
        assert handle.read() == originals[packaged(a)]


def test_a_root_an_earlier_version_hardlinked_gets_a_copy_of_its_own(tmp_path: "os.PathLike[str]",
                                                                      fixture_repo: FixtureRepo) -> None:
    """A root whose record says its tree was hardlinked from the store (what the tool did before issue 42) shares
    its files with other roots: its next run (the warm stamp's format changed) copies the tree again."""
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a)
    record = os.path.join(a.root, ".ensure_flydsl", "store.json")
    with open(record, "w") as handle:
        json.dump({"store": store, "tree": "0" * 64, "link_mode": "hardlink"}, handle)
    os.unlink(os.path.join(a.root, ".ensure_flydsl", "warm"))
    with open(a.env_json) as handle:
        twin = json.load(handle)
    twin["fingerprint"]["version"] = 5  # the earlier format's, which no longer answers
    with open(a.env_json, "w") as handle:
        json.dump(twin, handle)
    again = ensure_json(a)
    said = str(again["_stderr"])
    assert again["action"] == "provisioned" and "shares its files with the host store by hardlink" in said, said
    assert again["link_mode"] == "copy" and a.count("build") == 1 and not os.path.exists(record)
    assert os.stat(packaged(a)).st_nlink == 1
    assert_one_tree(a)


def test_prune_removes_unused_trees_and_leaves_what_it_did_not_make(tmp_path: "os.PathLike[str]",
                                                                    fixture_repo: FixtureRepo) -> None:
    """Roots keep their own copies, so a prune never breaks one; issue 42, item 4: files and folders the tool did
    not make under trees/ are left, each said in one line, and a folder in refs/ (an earlier version's) is no
    matter."""
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    ensure_json(a)
    ensure_json(b, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    listed = a.run("store", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    # The one shape of every JSON answer (GEAK's string keys left out rather than null).
    assert set(RESULT_KEYS) - set(GATE_STRINGS) <= set(answer) and answer["ok"] is True
    assert sorted(t["commit"] for t in answer["trees"]) == sorted([fixture_repo.commits["dev"],
                                                                   str(ensure_json(b)["commit"])])
    planted = [os.path.join(store, "trees", "notes"), os.path.join(store, "refs", "a-folder")]
    for folder in planted:
        os.makedirs(folder)
    pruned = a.run("store", "prune", "--max-size", "0")
    assert pruned.returncode == 0, pruned.stderr
    left = [line for line in pruned.stdout.splitlines() if "so this tool did not make it" in line]
    assert len(left) == 1 and "notes" in left[0], pruned.stdout
    assert json.loads(a.run("store", "list", "--json").stdout)["trees"] == []
    assert all(os.path.isdir(folder) for folder in planted)
    assert ensure_json(a)["action"] == "warm" and ensure_json(b)["action"] == "warm"
    data = json.loads(a.run("store", "prune", "--max-size", "0", "--json").stdout)
    assert data["ok"] and data["removed"] == [] and len(data["left"]) == 1
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
    with open(planted, "wb") as handle:
        handle.write(data.replace(b"__version__", b"__versioN__"))
    os.rename(planted, stored)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    result = ensure_json(b)
    said = str(result["_stderr"])
    assert "cannot be used" in said and "does not match its sha256" in said and "is removed from the store" in said
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
    assert {json.loads(out)["link_mode"] for out, _ in outs} <= {None, "copy"}  # a builder, or a copy


def test_a_store_on_another_file_system_serves_by_copy(tmp_path: "os.PathLike[str]",
                                                       fixture_repo: FixtureRepo) -> None:
    from tests.helpers.reliability import tmpfs

    with tmpfs(os.path.join(str(tmp_path), "store"), "64m") as store:
        a = root_of(str(tmp_path), fixture_repo, "a", store)
        assert ensure_json(a)["link_mode"] is None
        b = root_of(str(tmp_path), fixture_repo, "b", store)
        second = ensure_json(b)
        assert second["link_mode"] == "copy" and b.count("build") == 1, second["_stderr"]
        assert_one_tree(b)


def test_a_file_deleted_from_a_linked_tree_comes_back_from_the_store(tmp_path: "os.PathLike[str]",
                                                                     fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a)
    os.unlink(packaged(a, "flydsl/_mlir/_mlir_libs/_mlir.py"))  # the root's copy goes; the store keeps its own
    repaired = ensure_json(a)
    said = str(repaired["_stderr"])
    assert repaired["action"] == "provisioned" and "does not import" in said and "store: copied" in said, said
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
    assert first["how"] == "released" and first["link_mode"] is None, first["_stderr"]
    b = root_of(str(tmp_path), release_repo, "b", store, **offline)
    second = ensure_json(b)
    said = str(second["_stderr"])
    assert second["how"] == "released" and second["link_mode"] == "copy", said
    assert "downloading" not in said and "installing" not in said and "store: not probed again" in said
    assert set(second["durations"]) & {"release", "verify"} == set()  # type: ignore[arg-type]
    assert_one_tree(b)


def one_line(out: "subprocess.CompletedProcess[str]") -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_another_user_s_store_is_refused_or_gone_without(tmp_path: "os.PathLike[str]",
                                                         fixture_repo: FixtureRepo) -> None:
    """Issue 42, item 1: a root copied (hardlinked, before) the files of a store another user filled, and ran that
    user's code; a store of another user's is refused in one line when given, gone without (said once) when it
    is the default, and shared git objects another user can write are not borrowed."""
    if os.geteuid() != 0:
        pytest.skip("giving a store to nobody needs root")
    store = os.path.join(str(tmp_path), "store")
    ensure_json(root_of(str(tmp_path), fixture_repo, "a", store))
    objects = os.path.join(store, "git", "objects")
    subprocess.run(["chown", "-R", "65534:65534", objects], check=True)
    b = root_of(str(tmp_path), fixture_repo, "b", store)
    result = ensure_json(b)
    said = str(result["_stderr"])
    assert "are not borrowed: " in said and "uid 65534" in said and result["link_mode"] == "copy", said
    assert not os.path.exists(os.path.join(b.root, ".git", "objects", "info", "alternates"))
    subprocess.run(["chown", "-R", "65534:65534", store], check=True)
    c = root_of(str(tmp_path), fixture_repo, "c", store)
    line = one_line(c.run())
    assert "exit" not in line and "FLYDSL_STORE" in line and "uid 65534 (nobody)" in line, line
    assert "another user's store could change what runs here" in line and not os.path.exists(c.root)
    for action in (["list"], ["prune", "--max-size", "0"]):
        out = c.run("store", *action)
        assert out.returncode == 64 and "uid 65534" in one_line(out), out.stderr
    d = root_of(str(tmp_path), fixture_repo, "d", "")
    del d.env["FLYDSL_STORE"]
    os.makedirs(d.host_dir, exist_ok=True)
    os.rename(store, os.path.join(d.host_dir, "store"))  # the default store is nobody's (sudo without -H)
    result = ensure_json(d)
    lines = [line for line in str(result["_stderr"]).splitlines() if line.startswith("store:")]
    assert len(lines) == 1 and "going on without a store" in lines[0] and "uid 65534" in lines[0], lines
    assert result["how"] == "built" and result["link_mode"] is None


@pytest.mark.parametrize("lock", ["store.lock", "git/ensure-flydsl.lock"])
def test_a_held_store_lock_ends_the_wait_at_the_lock_timeout_naming_its_holder(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo, lock: str) -> None:
    """Issue 42, item 3: a stopped holder of the store's lock (or of its shared git repository's) blocked every
    root's add and fetch for good.  FLYDSL_LOCK_TIMEOUT bounds the wait and the holder is named: the store is an
    accelerator, so the run goes on without it; `store prune` ends with exit 7.  A copy takes no lock."""
    store = os.path.join(str(tmp_path), "store")
    ensure_json(root_of(str(tmp_path), fixture_repo, "a", store))
    hold = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); " \
           "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(600)"
    holder = subprocess.Popen([sys.executable, "-c", hold, os.path.join(store, lock)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        os.kill(holder.pid, signal.SIGSTOP)
        b = root_of(str(tmp_path), fixture_repo, "b", store, FLYDSL_LOCK_TIMEOUT="1")
        started = time.monotonic()
        copied = ensure_json(b)
        assert copied["link_mode"] == "copy" and time.monotonic() - started < 30, copied["_stderr"]
        built = ensure_json(b, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")  # a tree the store does not hold
        said = str(built["_stderr"])
        busy = f"{os.path.join(store, lock)} within 1 s: it is held by pid {holder.pid} (python"
        assert built["how"] == "built" and busy in said, said
        assert ("was not kept in" if lock == "store.lock" else "were not added to") in said
        if lock == "store.lock":
            pruned = b.run("store", "prune", "--max-size", "0", timeout=60)
            assert pruned.returncode == 7 and busy in pruned.stderr, pruned.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("what", ["fifo", "symlink"])
def test_anything_but_a_file_at_the_store_lock_is_refused_in_one_line(tmp_path: "os.PathLike[str]",
                                                                      fixture_repo: FixtureRepo, what: str) -> None:
    """Issue 42, item 3: a FIFO at the lock's name hung `ensure`, `store list` and `store prune` for good; a
    symlink there gave exit 70."""
    store = os.path.join(str(tmp_path), "store")
    os.makedirs(store)
    lock = os.path.join(store, "store.lock")
    os.mkfifo(lock) if what == "fifo" else os.symlink(os.path.join(str(tmp_path), "elsewhere"), lock)
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    for args in ([], ["store", "list"], ["store", "prune", "--max-size", "1G"]):
        out = a.run(*args, timeout=60)
        assert out.returncode == 64 and f"its lock {lock}" in one_line(out), (args, out.stderr)
    assert not os.path.exists(a.root)


def test_one_store_rule_in_every_command(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """Issue 42, item 11: `store list|prune` took a FLYDSL_STORE that is a regular file (exit 0, "holds no tree")
    where `ensure` refuses it (64)."""
    blocker = os.path.join(str(tmp_path), "a-file")
    with open(blocker, "w") as handle:
        handle.write("not a store\n")
    a = root_of(str(tmp_path), fixture_repo, "a", blocker)
    for args in ([], ["store", "list"], ["store", "list", "--json"], ["store", "prune", "--max-size", "0"]):
        out = a.run(*args)
        assert out.returncode == 64, (args, out.stdout, out.stderr)
        if "--json" in args:
            assert json.loads(out.stdout)["exit_code"] == 64
        else:
            assert "is a file" in one_line(out), out.stderr
    with open(blocker) as handle:
        assert handle.read() == "not a store\n"
    if os.geteuid() == 0:  # a given store whose lock is another user's: 64, as docs/store.md says (it went on)
        store = os.path.join(str(tmp_path), "store")
        os.makedirs(store)
        with open(os.path.join(store, "store.lock"), "w"):
            pass
        os.chown(os.path.join(store, "store.lock"), 65534, 65534)
        b = root_of(str(tmp_path), fixture_repo, "b", store)
        out = b.run()
        assert out.returncode == 64 and "store.lock: it belongs to uid 65534" in one_line(out), out.stderr


def test_a_tree_with_a_link_out_of_its_package_folder(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """Issue 42, item 5: such a tree was stored, then called damaged at every lookup, so every root rebuilt.  A
    link out of the tree is refused at the door, said once; one out of its package folder but inside the tree
    is stored as it is and copied."""
    store = os.path.join(str(tmp_path), "store")
    out_of_tree = 'ln -s ../../../outside.txt "$PKG/flydsl/notes.txt"'
    a = root_of(str(tmp_path), fixture_repo, "a", store, FIXTURE_BUILD_HOOK=out_of_tree)
    said = str(ensure_json(a)["_stderr"]).splitlines()
    refused = [line for line in said if line.startswith("store: the tree was not kept")]
    assert len(refused) == 1 and "resolves outside" in refused[0], said
    assert trees(store) == {} and not [line for line in said if "cannot be used" in line]
    inside = 'mkdir -p "$PKG/_data" && echo x > "$PKG/_data/x.txt" && ln -s ../_data "$PKG/flydsl/data"'
    b = root_of(str(tmp_path), fixture_repo, "b", store, FIXTURE_BUILD_HOOK=inside)
    assert ensure_json(b)["how"] == "built" and len(trees(store)) == 1
    c = root_of(str(tmp_path), fixture_repo, "c", store, FIXTURE_BUILD_HOOK=inside)
    copied = ensure_json(c)
    assert copied["link_mode"] == "copy" and "cannot be used" not in str(copied["_stderr"]), copied["_stderr"]
    assert os.readlink(packaged(c, "flydsl/data")) == "../_data" and c.count("build") == 2  # a and b built


def test_store_list_escapes_what_it_read(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    """Issue 42, item 9: `store list` printed a tree's fields as read, terminal escapes and newlines included."""
    from ensure_flydsl.trees.local import HostStore, Placer
    from ensure_flydsl.trees.manifest import cache_key, hashed_members

    store = HostStore.open(os.path.join(str(tmp_path), "store"))
    tree = os.path.join(str(tmp_path), "tree", "flydsl")
    os.makedirs(tree)
    fields: Dict[str, object] = {"commit": "\x1b]0;owned\x07\nremoved the tree everything", "abi": "\x1b[2J"}
    store.put(cache_key("tree", fields), fields, os.path.dirname(tree), hashed_members(os.path.dirname(tree))[0],
              how="built", signed_by=(), refuses=lambda _: None, placer=Placer())
    out = root_of(str(tmp_path), fixture_repo, "a", store.path).run("store", "list")
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout and len(out.stdout.splitlines()) == 2, out.stdout
