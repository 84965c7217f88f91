"""`clean` removes only what the tool created (issue 9, item 3), and smaller truths of a run (item 9):
the tool's own bytecode is not somebody's file, a step's first percent is shown, a failure before the
build carries the lines that explain it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

import pytest

from tests.helpers.build_fixtures import commit_build_files
from tests.helpers.flydsl_fixture import GIT_ENV, FixtureRepo, add_submodule
from tests.helpers.scenario import start, status, wait_for, wait_until
from tests.helpers.workspace import Workspace

# What FlyDSL's own .gitignore covers, and what agents write into the tree.
FLYDSL_IGNORES = "build-fly/\n__pycache__/\n*.diff\n*.log\nmy_ir_dumps*/\n.venv/\ntmp/\n"


def _checkout_with_ignores(ws: Workspace, repo: FixtureRepo, ignores: str = FLYDSL_IGNORES) -> None:
    sha = commit_build_files(repo, "ignores", {".gitignore": ignores})
    ws.env.update(FLYDSL_REPO=repo.url, FLYDSL_PIN=sha)
    out = ws.run()
    assert out.returncode == 0, out.stderr


def _plant(root: str) -> dict:  # type: ignore[type-arg]
    files = {
        "tuned.diff": "patch\n",  # ignored (*.diff)
        "my_ir_dumps_1/k.mlir": "ir\n",  # ignored folder
        "tmp/notes.txt": "notes\n",  # ignored folder
        "run.log": "log\n",  # ignored (*.log)
        "notes.md": "untracked, not ignored\n",
    }
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write(text)
    return files


def test_clean_keeps_files_the_gitignore_matches(ws: Workspace, own_repo: FixtureRepo) -> None:
    _checkout_with_ignores(ws, own_repo)
    planted = _plant(ws.root)
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    for rel, text in planted.items():
        with open(os.path.join(ws.root, rel)) as handle:
            assert handle.read() == text, rel
    assert "kept " + ws.root + " itself (still ensure-flydsl's checkout) and the files in it that ensure-flydsl " \
        "did not create" in out.stdout
    for rel in ("tuned.diff", "my_ir_dumps_1/", "tmp/", "run.log", "notes.md"):
        assert rel in out.stdout, rel
    # the tool's own parts are gone, but for the record that the checkout is the tool's
    for rel in ("build-fly", "flydsl_env.sh", "flydsl_env.json"):
        assert not os.path.lexists(os.path.join(ws.root, rel)), rel
    assert os.listdir(os.path.join(ws.root, ".ensure_flydsl")) == ["owner.json"]


def test_a_root_clean_kept_for_its_users_files_is_still_the_tools(ws: Workspace, own_repo: FixtureRepo) -> None:
    """Found by the state machine: clean kept the checkout but dropped the tool's claim on it, so every
    later run refused the root as somebody else's folder (exit 64)."""
    _checkout_with_ignores(ws, own_repo)
    planted = _plant(ws.root)
    assert ws.run("clean").returncode == 0
    again = ws.run()
    assert again.returncode == 0, again.stdout + again.stderr
    for rel, text in planted.items():
        with open(os.path.join(ws.root, rel)) as handle:
            assert handle.read() == text, rel


def test_clean_keeps_a_changed_tracked_file(ws: Workspace, own_repo: FixtureRepo) -> None:
    _checkout_with_ignores(ws, own_repo)
    kernel = os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
    with open(kernel, "a") as handle:
        handle.write("# tuned by hand\n")
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    with open(kernel) as handle:
        assert handle.read().endswith("# tuned by hand\n")
    assert "kernels/moe_gemm_2stage.py" in out.stdout


@pytest.mark.parametrize("ignores", [FLYDSL_IGNORES, FLYDSL_IGNORES.replace("__pycache__/\n", "")])
def test_clean_removes_a_root_that_holds_only_what_the_tool_made(ws: Workspace, own_repo: FixtureRepo,
                                                                 ignores: str) -> None:
    """The bytecode the tool's byte-compile and probes leave in kernels/__pycache__ is not somebody's work,
    whether the checkout ignores __pycache__ or not."""
    _checkout_with_ignores(ws, own_repo, ignores)
    assert os.path.isdir(os.path.join(ws.root, "kernels", "__pycache__"))
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    assert not os.path.exists(ws.root), out.stdout


def test_clean_refuses_right_after_start(ws: Workspace) -> None:
    """The worker is still probing (no lock taken yet): its record and log must stay."""
    started = start(ws, FIXTURE_BUILD_SLEEP="0.5")
    out = ws.run("clean")
    assert out.returncode == 7, out.stdout + out.stderr
    assert "cleaning now would take its files from under it" in out.stderr
    assert f"run {started['run_id']}" in out.stderr
    done = ws.run("wait", "--timeout", "60")
    assert done.returncode == 0, done.stdout
    assert os.path.exists(ws.log) and os.path.exists(ws.env_file)


def test_a_steps_first_percent_is_shown(ws: Workspace) -> None:
    """The build prints "[1/3]" right as its step starts, then works: the record must say 33%, not null."""
    # The build's first step works for 60 s after its "[1/3]" line: long enough for any poll to see it.
    started = start(ws, FIXTURE_BUILD_SLEEP="60")
    wait_for(os.path.join(ws.counter, "build.started"))

    def first_percent() -> bool:
        data = status(ws)
        return (data["step"], data["percent"]) == ("build", 33.3)

    wait_until("the record shows the build's [1/3]", first_percent, timeout=50)
    os.killpg(int(str(started["pid"])), signal.SIGKILL)  # the rest of the build is not this test's
    died = ws.run("wait", "--timeout", "60")
    assert died.returncode == 9, died.stdout


def test_a_failure_before_the_build_carries_its_lines(ws: Workspace, own_repo: FixtureRepo, tmp_path: str) -> None:
    sub = os.path.join(str(tmp_path), "dlpack.git")
    sha = add_submodule(own_repo, sub, "with-sub")
    shutil.rmtree(sub)
    out = ws.run(FLYDSL_REPO=own_repo.url, FLYDSL_PIN=sha)
    assert out.returncode == 2
    with open(ws.fail_marker) as handle:
        marker = json.load(handle)
    assert marker["stage"] == "submodules"
    assert any("dlpack" in line for line in marker["log_tail"]), marker["log_tail"]


@pytest.mark.parametrize("keep", ["branch", "stash", "detached"])
def test_clean_keeps_a_root_holding_commits_of_somebodys(ws: Workspace, own_repo: FixtureRepo, keep: str) -> None:
    """A commit (on a branch, in a stash, on the detached HEAD) leaves git status clean; clean removed the whole
    root with it, and the work with it."""
    _checkout_with_ignores(ws, own_repo)
    env = {**os.environ, **GIT_ENV}
    kernel = os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")
    with open(kernel, "a") as handle:
        handle.write("# tuned by hand\n")
    if keep == "branch":
        subprocess.run(["git", "-C", ws.root, "switch", "-q", "-c", "tuned"], env=env, check=True)
    if keep == "stash":
        subprocess.run(["git", "-C", ws.root, "stash", "-q"], env=env, check=True)
    else:
        subprocess.run(["git", "-C", ws.root, "commit", "-q", "-am", "tuned"], env=env, check=True)
    out = ws.run("clean")
    assert out.returncode == 0, out.stderr
    assert os.path.isdir(os.path.join(ws.root, ".git")), out.stdout
    shown = {"branch": "refs/heads/tuned", "stash": "refs/stash", "detached": "HEAD"}[keep]
    assert f"did not create: {shown}" in out.stdout


def test_clean_of_an_adopted_clone_says_it_was_adopted(ws: Workspace) -> None:
    """A clone's own branch (refs/heads/main) is its maker's, not work the tool must keep: the note stays."""
    subprocess.run(["git", "clone", "-q", ws.repo.url, ws.root], check=True)
    assert ws.run().returncode == 0
    out = ws.run("clean")
    assert f"kept {ws.root} itself: ensure-flydsl adopted it" in out.stdout, out.stdout
