"""kill -9 and Ctrl-C at every stage of a run, timed to land inside the work (git, the LLVM step, the build,
the verification probe) as well as at the fault points between steps; damage done to a finished tree.

After each: a plain rerun succeeds with a finished build of the pin, no success marker ever names an
unfinished tree, and the lock file is the same file.  (tests/test_faults.py kills once at each fault point
of ensure_flydsl.support.faults.POINTS on a fresh root; this file adds kills inside commands, chains of kills on
one root, the cache's points, Ctrl-C at more stages, and damage after success.)
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import pytest

import ensure_flydsl
from ensure_flydsl.runs.records import RunStore
from ensure_flydsl.support.faults import POINTS
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.flydsl_fixture import FixtureRepo, git, make_repo
from tests.helpers.reliability import git_wrapper, kill_group, record, wait_for_file
from tests.helpers.scenario import Barrier, assert_finished_build_of, assert_one_tree, killed_at, wait_until
from tests.helpers.workspace import Workspace, other_python

BLOB_BYTES = 16 << 20  # makes `git fetch` take about a second here: long enough to be killed inside
STAGE_OF_POINT = {
    "root-claimed": "fetch", "fetched": "fetch", "checkout-begun": "checkout", "checked-out": "checkout",
    "fixes-applied": "fixes", "llvm-built": "llvm", "build-done": "build", "release-installed": "release",
    "verified": "verify", "twin-written": "publish", "published": "publish", "cache-fetched": "cache",
    "cache-published": "cache",
}
CHAIN = ["root-claimed", "fetched", "checkout-begun", "checked-out", "fixes-applied", "llvm-built", "build-done",
         "verified", "twin-written", "published"]


def test_every_fault_point_has_a_stage() -> None:
    assert set(POINTS) == set(STAGE_OF_POINT)
    assert {"cache-fetched", "cache-published"} <= set(POINTS)


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Tuple[FixtureRepo, str]:
    """The fixture repository plus a commit with a large incompressible file; returns it and that file's sha256."""
    repo = make_repo(str(tmp_path_factory.mktemp("big-upstream") / "FlyDSL.git"))
    data = os.urandom(BLOB_BYTES)
    with open(os.path.join(repo.path, "thirdparty", "blob.bin"), "wb") as handle:
        handle.write(data)
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", "big: a large file")
    repo.commits["big"] = git(repo.path, "rev-parse", "HEAD")
    return repo, hashlib.sha256(data).hexdigest()


def lock_inode(ws: Workspace) -> Optional[int]:
    try:
        return os.stat(ws.lock_file).st_ino
    except FileNotFoundError:
        return None


def rerun_succeeds(ws: Workspace, commit: str, **env: str) -> Dict[str, object]:
    out = ws.run("--json", **env)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["commit"] == commit and result["tree"] == ws.root
    assert_one_tree(ws)
    assert ws.env_twin()["commit"] == commit
    assert not os.path.exists(ws.fail_marker)
    return dict(result)


def no_build_left_running(ws: Workspace) -> None:
    """No process still runs one of the root's build scripts (an orphan of the killed run)."""
    needle = os.path.join(ws.root, "scripts").encode()
    deadline = time.monotonic() + 20
    while True:
        alive = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        if needle in handle.read():
                            alive.append(pid)
                except OSError:
                    pass
        if not alive:
            return
        assert time.monotonic() < deadline, f"orphaned build processes still running: {alive}"
        time.sleep(0.05)


# -- inside git ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sub, offset", [("ls-remote", 0.0), ("fetch", 0.0), ("fetch", 0.3), ("fetch", "commit"),
                                         ("checkout", 0.0), ("checkout", 0.01)])
def test_kill_9_inside_git(ws: Workspace, big_repo: Tuple[FixtureRepo, str], which_git: str,
                           tmp_path: "os.PathLike[str]", sub: str, offset: object) -> None:
    """``offset``: seconds after git started, or ``commit``: as soon as the pin's commit object has arrived
    (its blobs still coming): the state in which the commit is "already here" but its tree is not."""
    repo, blob_sha = big_repo
    commit = repo.commits["big"]
    slow = os.path.join(str(tmp_path), "slow")
    os.makedirs(slow)
    path = git_wrapper(os.path.join(str(tmp_path), "gitbin"), which_git) + os.pathsep + ws.env["PATH"]
    env = dict(ws.env, FLYDSL_REPO=repo.url, FLYDSL_PIN=commit, PATH=path)
    proc = subprocess.Popen(ws.cmd(), env=dict(env, GIT_SLOW_DIR=slow, GIT_SLOW_SUB=sub), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_file(os.path.join(slow, sub + ".entered"), proc=proc)
        if offset == "commit":
            wait_for_file(os.path.join(ws.root, ".git", "objects", commit[:2], commit[2:]), proc=proc)
        else:
            assert isinstance(offset, float)
            time.sleep(offset)
        kill_group(proc.pid)
        proc.communicate(timeout=30)
    finally:
        kill_group(proc.pid)
    inside = not os.path.exists(os.path.join(slow, sub + ".done"))
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(ws.env_file)
    inode = lock_inode(ws)
    out = ws.run("--json", FLYDSL_REPO=repo.url, FLYDSL_PIN=commit, PATH=path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["commit"] == commit
    assert_one_tree(ws)
    with open(os.path.join(ws.root, "thirdparty", "blob.bin"), "rb") as handle:
        assert hashlib.sha256(handle.read()).hexdigest() == blob_sha
    status = subprocess.run(["git", "-C", ws.root, "status", "--porcelain"], stdout=subprocess.PIPE, text=True)
    assert status.stdout == "", status.stdout  # the checkout is the pin, nothing half-written
    assert inode is not None and lock_inode(ws) == inode
    stage = "checkout" if sub == "checkout" else "fetch"
    when = "once the commit object arrived" if offset == "commit" else f"{offset} s"
    record("fault", stage=stage, how=f"kill -9 of the run's group {when} into git {sub}", inside=inside,
           survived=True)


# -- inside the LLVM step, the build and the verification probe ------------------------------------------
SLOW_PROBE = """#!/bin/sh
# The target interpreter, made slow for the verification probe (once the build's stamp exists) when armed.
if [ -n "${SLOW_PROBE_ARM:-}" ] && [ -f "$SLOW_PROBE_ARM" ]; then
  : > "$SLOW_PROBE_DIR/probe.entered"
  sleep 30
fi
exec "@PY@" "$@"
"""


@pytest.mark.parametrize("stage, scope", [("llvm", "run"), ("llvm", "everything"), ("build", "run"),
                                          ("build", "everything"), ("verify", "run")])
def test_kill_9_inside_a_step(ws: Workspace, tmp_path: "os.PathLike[str]", stage: str, scope: str) -> None:
    """``run``: the run's process group (the build, in a group of its own, is left to the run's watchdog, as
    when the OOM killer takes the main process); ``everything``: the build's group too (a container stop)."""
    env: Dict[str, str] = {}
    if stage == "verify":
        wrapper = os.path.join(str(tmp_path), "py bin", "python")
        os.makedirs(os.path.dirname(wrapper))
        with open(wrapper, "w") as handle:
            handle.write(SLOW_PROBE.replace("@PY@", sys.executable))
        os.chmod(wrapper, 0o755)
        env["FLYDSL_PYTHON"] = wrapper
        started = os.path.join(str(tmp_path), "probe.entered")
        armed = dict(env, SLOW_PROBE_DIR=str(tmp_path),
                     SLOW_PROBE_ARM=os.path.join(ws.root, ".ensure_flydsl", "stamps", "build.json"))
    else:
        # The script holds at a barrier once its work is done and before it installs what it made.
        barrier = Barrier(str(tmp_path), stage)
        started = barrier.reached
        armed = dict(env, **{f"FIXTURE_{stage.upper()}_HOOK": barrier.hook})
    proc = ws.popen(**armed)
    try:
        wait_for_file(started, proc=proc)
        build_pgid = None
        if stage != "verify":
            wait_until("the record names the build's process group",
                       lambda: isinstance(getattr(RunStore(ws.root).current(), "build_pgid", None), int))
            current = RunStore(ws.root).current()
            build_pgid = current.build_pgid if current is not None else None
        kill_group(proc.pid)
        if scope == "everything":
            assert isinstance(build_pgid, int), "the build's group is known while it runs"
            kill_group(build_pgid)
        proc.communicate(timeout=30)
    finally:
        kill_group(proc.pid)
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(ws.env_file), "a success marker for an unfinished tree"
    rerun_succeeds(ws, ws.repo.commits["dev"], **env)  # at once: the orphan may still be dying
    # The killed step is redone once; a finished one (the build, for a kill in the probe after it) is not.
    assert (ws.count("llvm"), ws.count("build")) == {"llvm": (2, 1), "build": (1, 2), "verify": (1, 1)}[stage]
    no_build_left_running(ws)
    record("fault", stage=stage, how=f"kill -9 of the {'run' if scope == 'run' else 'run and its build'} "
           f"inside {stage}", inside=True, survived=True)


# -- chains of kills on one root -------------------------------------------------------------------------
def test_a_chain_of_kills_at_every_point_on_one_root(ws: Workspace) -> None:
    """Each run resumes what the killed ones left and dies at the next point; then a plain run finishes."""
    inode = None
    for point in CHAIN:
        out = killed_at(ws, point)
        # Every point of the chain is reached: each run resumes what the last one left, up to the next point.
        assert out.returncode == -signal.SIGKILL, (point, out.returncode, out.stdout + out.stderr)
        if point != "published":
            assert not os.path.exists(ws.env_file), f"a success marker after a kill at {point}"
        inode = inode or lock_inode(ws)
        record("fault", stage=STAGE_OF_POINT[point], how=f"kill -9 at {point}, chained on one root",
               inside=True, survived=True)
    assert inode is not None
    rerun_succeeds(ws, ws.repo.commits["dev"])
    # Killed after a script succeeded but before its record: LLVM (llvm-built) and the build (build-done) are
    # each redone once, nothing else twice.
    assert (ws.count("llvm"), ws.count("build")) == (2, 2)
    assert lock_inode(ws) == inode


def test_a_chain_of_kills_while_changing_pins(ws: Workspace) -> None:
    """A finished tree for one pin, then a kill at each point of the rebuild for another pin, alternating."""
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # each pin's own tree
    assert ws.run().returncode == 0
    pins = [ws.repo.commits["v0.2.3"], ws.repo.commits["dev"]]
    for n, point in enumerate(["checkout-begun", "checked-out", "build-done", "verified", "twin-written"]):
        pin = pins[n % 2]
        out = killed_at(ws, point, FLYDSL_PIN=pin)
        assert out.returncode == -signal.SIGKILL, (point, out.returncode, out.stdout + out.stderr)
        # Only the first run found an env file (the finished tree's) to take away; no run got as far as
        # writing one, and only the last got as far as its twin (written just before it).
        assert (f"took away {ws.env_file} (flydsl 0.2.2, built)" in out.stdout) == (n == 0), (point, out.stdout)
        assert not os.path.exists(ws.env_file), (point, "an env file for an unfinished tree")
        assert os.path.exists(ws.env_json) == (point == "twin-written"), point
        record("fault", stage=STAGE_OF_POINT[point], how=f"kill -9 at {point} while switching pins",
               inside=True, survived=True)
    assert ws.env_twin()["commit"] == pins[0]
    builds = ws.count("build")
    for pin in pins:
        result = rerun_succeeds(ws, pin, FLYDSL_PIN=pin)
        assert result["version"] == ("0.2.3" if pin == pins[0] else "0.2.2")
    # v0.2.3's tree was verified and stamped before the last kill, and dev's comes back from the host store
    # (issue 28): nothing is built again.
    assert ws.count("build") == builds and ws.count("llvm") == 1


# -- the cache's points ----------------------------------------------------------------------------------
def second_host(tmp_path: "os.PathLike[str]", repo: FixtureRepo, cache: str) -> Workspace:
    other = Workspace(os.path.join(str(tmp_path), "host2", "base"), repo)
    other.env["FLYDSL_CACHE"] = cache
    return other


def test_kill_9_at_cache_published(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """The point is reached twice in a build: after the MLIR upload (before the FlyDSL build), then after the
    tree's upload (after the env file)."""
    cache = os.path.join(str(tmp_path), "cache")
    ws.env["FLYDSL_CACHE"] = cache
    out = killed_at(ws, "cache-published")
    assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
    assert not os.path.exists(ws.env_file) and [e.kind for e in open_cache(cache).entries()] == ["mlir"]
    record("fault", stage="cache", how="kill -9 at cache-published (the MLIR upload)", inside=True, survived=True)
    out = killed_at(ws, "cache-published")
    assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
    assert_finished_build_of(ws, ws.repo.commits["dev"])  # the env file comes before the tree's upload
    assert ws.count("llvm") == 1
    entries = open_cache(cache).entries()
    assert sorted(e.kind for e in entries) == ["mlir", "tree"]
    for entry in entries:  # complete entries: every one fetches and verifies
        open_cache(cache).get(entry, os.path.join(str(tmp_path), "check-" + entry.kind))
    assert ws.run().returncode == 0
    other = second_host(tmp_path, ws.repo, cache)
    result = rerun_succeeds(other, ws.repo.commits["dev"])
    assert result["how"] == "cached" and other.count("build") == 0 and other.count("llvm") == 0
    record("fault", stage="cache", how="kill -9 at cache-published (the tree's upload)", inside=True, survived=True)


def test_kill_9_at_cache_fetched_twice_then_rerun(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    cache = os.path.join(str(tmp_path), "cache")
    assert ws.run(FLYDSL_CACHE=cache).returncode == 0
    other = second_host(tmp_path, ws.repo, cache)
    for _ in range(2):
        out = killed_at(other, "cache-fetched")
        assert out.returncode == -signal.SIGKILL, out.stdout + out.stderr
        assert not os.path.exists(other.env_file)
        record("fault", stage="cache", how="kill -9 at cache-fetched (twice in a row)", inside=True, survived=True)
    result = rerun_succeeds(other, ws.repo.commits["dev"])
    assert result["how"] == "cached" and other.count("build") == 0 and other.count("llvm") == 0
    packages = os.path.join(other.root, "build-fly")
    assert [n for n in os.listdir(packages) if ".fetch-" in n] == []  # no half-fetched folder left


# -- Ctrl-C at more stages -------------------------------------------------------------------------------
@pytest.mark.parametrize("stage, target", [("fetch", "process"), ("fetch", "group"), ("llvm", "group")])
def test_ctrl_c_gives_130_and_a_resumable_state(ws: Workspace, big_repo: Tuple[FixtureRepo, str], which_git: str,
                                                tmp_path: "os.PathLike[str]", stage: str, target: str) -> None:
    """SIGINT to the run (``process``) or to its whole process group, as a terminal's Ctrl-C does."""
    repo, _sha = big_repo
    slow = os.path.join(str(tmp_path), "slow")
    os.makedirs(slow)
    path = git_wrapper(os.path.join(str(tmp_path), "gitbin"), which_git) + os.pathsep + ws.env["PATH"]
    env = dict(ws.env, FLYDSL_REPO=repo.url, FLYDSL_PIN=repo.commits["big"], PATH=path)
    if stage == "fetch":
        env.update(GIT_SLOW_DIR=slow, GIT_SLOW_SUB="fetch")
        started = os.path.join(slow, "fetch.entered")
    else:
        env.update(FIXTURE_LLVM_SLEEP="1")
        started = os.path.join(ws.counter, "llvm.started")
    proc = subprocess.Popen(ws.cmd(), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        wait_for_file(started, proc=proc)
        time.sleep(0.1)
        if target == "group":
            kill_group(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc.pid)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT; the next run resumes" in err
    marker = ws.marker()
    assert marker["exit_code"] == 130 and marker["stage"] == stage
    assert not os.path.exists(ws.env_file)
    no_build_left_running(ws)
    rerun_succeeds(ws, repo.commits["big"], FLYDSL_REPO=repo.url, FLYDSL_PIN=repo.commits["big"], PATH=path)
    record("interrupt", stage=stage, target=target, exit_code=proc.returncode, resumed=True)


def _class_names() -> Set[str]:
    package = os.path.dirname(ensure_flydsl.__file__)
    found: Set[str] = set()
    for folder, _dirs, files in os.walk(package):
        for name in (f for f in files if f.endswith(".py")):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                found.update(n.name for n in ast.walk(ast.parse(handle.read())) if isinstance(n, ast.ClassDef))
    return found


CLASSES = _class_names()


def test_a_ctrl_c_at_any_moment_of_a_commands_start_is_exit_130_never_a_traceback(ws: Workspace) -> None:
    """The front door's hand-off, the imports and the parser come before a command takes Ctrl-C over: a SIGINT
    there is one line and exit 130.  (Before the front door runs, Python's own start-up and its import of the
    package end by the signal: no code of the tool is on the stack then.)"""
    # A frame of the tool's that is not its import: a module's body, or a class's made at the import, is one.
    frame = re.compile(r'File "[^"]*ensure_flydsl[^"]*", line \d+, in (\S+)')
    codes = []
    for step in range(40):
        proc = ws.popen("status")
        time.sleep(step * 0.012)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        assert not [name for name in frame.findall(err) if name != "<module>" and name not in CLASSES], (step, err)
        if proc.returncode == 130:
            assert err.strip().splitlines()[-1].startswith("ensure-flydsl: interrupted"), (step, err)
        codes.append(proc.returncode)
    assert 130 in codes, codes


@pytest.mark.parametrize("module", ["difflib", "statistics"])
def test_a_ctrl_c_while_the_command_line_makes_a_class_is_exit_130(ws: Workspace, tmp_path: str, module: str) -> None:
    """The window the sweep above met by chance: a SIGINT inside a class being made (a descriptor's __set_name__,
    as a dataclass field has) reached Python before 3.12 as a RuntimeError, past `except KeyboardInterrupt`.
    The command line imports difflib at its top, and `status` imports statistics when it is dispatched."""
    shadow = os.path.join(str(tmp_path), f"{module}.py")
    with open(shadow, "w") as handle:
        handle.write("import os, signal\n\n\nclass Named:\n    def __set_name__(self, owner, name):\n"
                     "        os.kill(os.getpid(), signal.SIGINT)\n        sum(range(1000))\n\n\n"
                     "class Made:\n    field = Named()\n")
    out = ws.run("status", PYTHONPATH=str(tmp_path))
    assert (out.returncode, out.stderr) == (130, "ensure-flydsl: interrupted (SIGINT) before it began; nothing was "
                                                  "changed\n"), out.stderr


def test_a_ctrl_c_while_the_front_door_imports_signal_is_exit_130(ws: Workspace, tmp_path: str) -> None:
    """Another window the sweep met (in CI): a SIGINT while the front door, on a miss, imports signal (whose enums
    are classes) to put its handler in place; it was a traceback through __main__.main."""
    shadow = os.path.join(str(tmp_path), "signal.py")  # the front door imports signal after its answer, on a miss
    with open(shadow, "w") as handle:
        handle.write("import os\n\nos.kill(os.getpid(), 2)\nsum(range(100000))\n")
    out = ws.run("status", PYTHONPATH=str(tmp_path))
    assert (out.returncode, out.stderr) == (130, "ensure-flydsl: interrupted (SIGINT) before it began; nothing was "
                                                  "changed\n"), out.stderr


def test_ctrl_c_of_wait_leaves_the_run_going(ws: Workspace) -> None:
    assert ws.run("start", FIXTURE_BUILD_SLEEP="0.7").returncode == 0
    waiter = ws.popen("wait")
    wait_for_file(os.path.join(ws.counter, "build.started"))
    waiter.send_signal(signal.SIGINT)
    _out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 130, err
    out = ws.run("wait", "--timeout", "60", timeout=90)
    assert out.returncode == 0, out.stdout
    assert_one_tree(ws)
    record("interrupt", stage="wait", target="process", exit_code=130, resumed=True)


# -- damage after success ---------------------------------------------------------------------------------
def _rmtree(*parts: str) -> Callable[[Workspace], None]:
    return lambda ws: shutil.rmtree(os.path.join(ws.root, *parts))


def _unlink(*parts: str) -> Callable[[Workspace], None]:
    return lambda ws: os.unlink(os.path.join(ws.root, *parts))


def _truncate_env_file(ws: Workspace) -> None:
    with open(ws.env_file, "r+") as handle:
        handle.truncate(20)


DAMAGES: List[Tuple[str, Callable[[Workspace], None]]] = [
    ("build-fly/python_packages/flydsl removed", _rmtree("build-fly", "python_packages", "flydsl")),
    ("a compiled part removed (_mlir_libs)", _rmtree("build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs")),
    ("build-fly/ removed", _rmtree("build-fly")),
    ("kernels/ removed", _rmtree("kernels")),
    ("python/flydsl/__init__.py removed", _unlink("python", "flydsl", "__init__.py")),
    ("flydsl_env.sh removed", lambda ws: os.unlink(ws.env_file)),
    ("flydsl_env.sh truncated", _truncate_env_file),
    ("flydsl_env.json removed", lambda ws: os.unlink(ws.env_json)),
    ("the step stamps removed", _rmtree(".ensure_flydsl", "stamps")),
]


def test_damage_after_success_is_detected_and_repaired(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    commit = ws.repo.commits["dev"]
    for name, damage in DAMAGES:
        damage(ws)
        out = ws.run("--json")
        assert out.returncode == 0, f"{name}: {out.stderr}"
        result = json.loads(out.stdout)
        assert result["commit"] in (commit, None) and result["tree"] == ws.root, (name, result)
        assert_one_tree(ws)
        again = json.loads(ws.run("--json").stdout)  # and the repaired state is stable
        assert again["action"] == "warm", (name, again)
        record("damage", what=name, detected=True, repaired=result["action"] != "warm", survived=True)


@pytest.fixture
def upgradable_venv(tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    """A venv of this interpreter, and a pyenv interpreter of another minor version to recreate it with."""
    other = other_python(sys.implementation.cache_tag)
    assert other, "this machine has pyenv interpreters; the test needs one of another minor version"
    folder = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True)
    return folder, other


def test_the_interpreter_replaced_after_success_is_detected_and_rebuilt_for(ws: Workspace,
                                                                           upgradable_venv: Tuple[str, str]) -> None:
    folder, other = upgradable_venv
    python = os.path.join(folder, "bin", "python")
    first = json.loads(ws.run("--json", FLYDSL_PYTHON=python).stdout)
    assert first["how"] == "built" and first["python_version"].startswith("%d.%d." % sys.version_info[:2])
    # An upgrade in place: the same venv path, now another minor version (as `python3.X -m venv --clear`).
    subprocess.run([other, "-m", "venv", "--clear", "--without-pip", folder], check=True)
    out = ws.run("--json", FLYDSL_PYTHON=python)
    assert out.returncode == 0, out.stderr
    second = json.loads(out.stdout)
    assert second["action"] == "provisioned" and second["abi"] != first["abi"]
    assert second["python_version"].split(".")[:2] != first["python_version"].split(".")[:2]
    assert ws.count("build") == 2 and ws.count("llvm") == 2
    assert_one_tree(ws, python)
    record("damage", what="the interpreter replaced by another minor version", detected=True, repaired=True,
           survived=True)


HOLD_ALIVE = """
import os, signal, sys
from ensure_flydsl.layout import run_reserve_file
from ensure_flydsl.runs.records import RESERVE_BYTES, RunStore
store = RunStore(sys.argv[1])
store.hold_alive(sys.argv[2])  # as RunStore.begin and `start` do, before the run's record is written
open(run_reserve_file(store.folder, sys.argv[2]), "wb").write(os.urandom(RESERVE_BYTES))
if sys.argv[3] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_run_killed_before_its_record_leaves_no_alive_file_for_ever(ws: Workspace) -> None:
    """A process killed between creating its run's alive file and writing its record left the alive file and its
    64 KiB of room for ever (the prune went by records): the next run removes them once old and free, and never
    the alive file of a run that holds it."""
    dead, live = "20261208-000000-dead00", "20261208-000000-11fe00"
    killed = subprocess.run([sys.executable, "-c", HOLD_ALIVE, ws.root, dead, "kill"], timeout=60)
    assert killed.returncode == -signal.SIGKILL
    holder = subprocess.Popen([sys.executable, "-c", HOLD_ALIVE, ws.root, live, "hold"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        store = RunStore(ws.root)
        hour_ago = time.time() - 3600
        for name in os.listdir(store.folder):
            os.utime(os.path.join(store.folder, name), (hour_ago, hour_ago))
        assert ws.run().returncode == 0  # a run: it prunes the records' folder
        left = set(os.listdir(store.folder))
        assert f"{dead}.alive" not in left and f"{dead}.reserve" not in left
        assert {f"{live}.alive", f"{live}.reserve"} <= left and store.is_alive(live)
    finally:
        holder.communicate("", timeout=60)
