"""Issue 18, points A and B: no call that cannot succeed takes away a working install, and one answer (the
seed's version-only gate, or --exact-pin) shared by `ensure`, `env`, `verify`, `status` and `wait`.

Each test starts from a root whose tree works (built by the tool from a pin) and makes a call that cannot
succeed: another pin whose repository is unreachable, an interpreter that lacks a module the pin imports,
a mistyped pin.  The env file, its twin, the tree and the checkout must stay and still answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Tuple

import pytest

from tests.helpers.flydsl_fixture import KERNEL, FixtureRepo, git
from tests.helpers.scenario import assert_one_tree, status
from tests.helpers.workspace import Workspace

UNREACHABLE = "file:///nonexistent/FlyDSL.git"


def snapshot(ws: Workspace) -> Tuple[bytes, bytes, str, bytes]:
    """The env file, its twin, the checkout's HEAD and the tree's stamp: all that says what the root holds."""
    def read(path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

    head = subprocess.run(["git", "-C", ws.root, "rev-parse", "HEAD"], stdout=subprocess.PIPE, text=True,
                          check=True).stdout.strip()
    return (read(ws.env_file), read(ws.env_json), head,
            read(os.path.join(ws.root, ".ensure_flydsl", "stamps", "tree.json")))


def built_at_v022(ws: Workspace) -> Tuple[bytes, bytes, str, bytes]:
    """A working tree in the root built from the tag v0.2.2 (flydsl 0.2.2), for the workspace's request."""
    ws.env["FLYDSL_PIN"] = "v0.2.2"
    out = ws.run()
    assert out.returncode == 0, out.stderr
    assert_one_tree(ws)
    return snapshot(ws)


def still_answers(ws: Workspace, before: Tuple[bytes, bytes, str, bytes]) -> None:
    assert snapshot(ws) == before
    assert_one_tree(ws)
    assert status(ws)["state"] == "succeeded"  # the request that made it is still answered


def test_another_pin_with_an_unreachable_remote_reuses_the_working_tree(ws: Workspace) -> None:
    before = built_at_v022(ws)
    out = ws.run("--json", "--verify", FLYDSL_PIN=ws.repo.commits["dev"], FLYDSL_REPO=UNREACHABLE)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] is True and result["built"] is False and result["action"] == "verified"
    assert result["version"] == "0.2.2" and result["commit"] == ws.repo.commits["v0.2.2"]
    assert snapshot(ws)[2:] == before[2:]  # the checkout and the tree's stamp untouched
    assert_one_tree(ws)


def test_exact_pin_with_an_unreachable_remote_leaves_the_install_answering(ws: Workspace) -> None:
    before = built_at_v022(ws)
    request = {"FLYDSL_PIN": ws.repo.commits["dev"], "FLYDSL_REPO": UNREACHABLE, "FLYDSL_EXACT_PIN": "1"}
    out = ws.run("--json", **request)
    assert out.returncode == 2, out.stderr
    data = json.loads(out.stdout)
    assert data["ok"] is False and data["exit_code"] == 2 and data["stage"] == "fetch"
    assert data["installed"]["version"] == "0.2.2" and data["installed"]["answers"] is False
    assert "FLYDSL_EXACT_PIN" in data["installed"]["why_not"]
    still_answers(ws, before)
    # Both truths: this request failed; the root still holds flydsl 0.2.2.
    failed = status(ws, **request)
    assert failed["state"] == "failed" and failed["exit_code"] == 2 and failed["hint"]
    assert failed["installed"]["version"] == "0.2.2" and failed["installed"]["env_file"] == ws.env_file
    text = ws.run("status", **request).stdout
    assert "the root still holds flydsl 0.2.2 (built)" in text and "next:" in text
    waited = ws.run("wait", "--timeout", "0", **request)
    assert waited.returncode == 2 and "the root still holds flydsl 0.2.2" in waited.stdout


def test_exact_pin_that_does_not_exist_leaves_the_install_answering(ws: Workspace) -> None:
    before = built_at_v022(ws)
    out = ws.run(FLYDSL_PIN="v9.9.9", FLYDSL_EXACT_PIN="1")
    assert out.returncode == 3, out.stderr
    assert "the pin v9.9.9 is not a commit, tag or branch" in out.stderr
    assert ws.marker()["stage"] == "checkout" and ws.marker()["exit_code"] == 3
    still_answers(ws, before)
    # Without --exact-pin the working tree passes the gate whatever the pin says.
    assert ws.run(FLYDSL_PIN="v9.9.9").returncode == 0
    still_answers(ws, before)


@pytest.fixture
def needs_a_module(own_repo: FixtureRepo, tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    """A pin whose kernel imports ``fixture_needed_mod`` at module level, and an interpreter (a venv) that
    has it; the test's own interpreter does not.  Returns (pin, the venv's python)."""
    pin = own_repo.commit("needs-mod", "0.2.2", files={
        "kernels/moe_gemm_2stage.py": KERNEL + "import fixture_needed_mod  # noqa: F401\n"})
    git(own_repo.path, "tag", "v0.2.2-needs")
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "fixture_needed_mod.py"), "w") as handle:
        handle.write("VALUE = 1\n")
    return pin, python


def test_an_interpreter_without_a_required_module_leaves_the_install_answering(
        ws: Workspace, own_repo: FixtureRepo, needs_a_module: Tuple[str, str]) -> None:
    pin, python = needs_a_module
    ws.env.update(FLYDSL_REPO=own_repo.url, FLYDSL_PIN=pin, FLYDSL_PYTHON=python)
    assert ws.run().returncode == 0
    before = snapshot(ws)
    # The same pin for an interpreter that lacks the module: refused from the pin's objects, before any
    # checkout, with the env file made for the venv's interpreter still there.
    out = ws.run(FLYDSL_PYTHON=sys.executable)
    assert out.returncode == 6, out.stderr
    assert "cannot import fixture_needed_mod" in out.stderr
    assert ws.marker()["stage"] == "requirements"
    assert snapshot(ws) == before
    assert status(ws)["state"] == "succeeded"
    imported = ws.source_and_import(python)
    assert imported.returncode == 0 and imported.stdout.splitlines()[0].startswith(ws.root), imported.stderr
    failed = status(ws, FLYDSL_PYTHON=sys.executable)
    assert failed["state"] == "failed" and failed["stage"] == "requirements"
    assert failed["installed"]["python"] == python and failed["installed"]["answers"] is False


def test_a_broken_tree_takes_its_env_file_away(ws: Workspace) -> None:
    """The env file IS untrue when the tree it names no longer passes the probe: it goes, under the lock,
    even when the run then fails before its build starts."""
    built_at_v022(ws)
    os.unlink(os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "_mlir", "_mlir_libs", "_mlir.py"))
    out = ws.run(FLYDSL_REPO=UNREACHABLE)
    assert out.returncode == 2, out.stderr
    assert f"took away {ws.env_file}: the tree it names does not pass the probe now" in out.stdout
    assert not os.path.exists(ws.env_file) and not os.path.exists(ws.env_json)


def commands_answer(ws: Workspace, **request: str) -> Dict[str, object]:
    env_json = ws.run("env", "--json", **request)
    return {
        "status": status(ws, **request)["state"],
        "wait": ws.run("wait", "--timeout", "0", **request).returncode,
        "env": ws.run("env", **request).returncode,
        "env --json": (env_json.returncode, json.loads(env_json.stdout)["ok"]),
        "verify": ws.run("verify", **request).returncode,
        "warm": json.loads(ws.run("--json", FLYDSL_STRATEGY="reuse-only", **request).stdout).get("ok"),
    }


def test_one_answer_for_ensure_env_verify_status_and_wait(ws: Workspace) -> None:
    built_at_v022(ws)
    # Another pin, the same floor: the tree passes this request's gate, for every command alike.
    other = {"FLYDSL_PIN": ws.repo.commits["dev"], "FLYDSL_REPO": UNREACHABLE}
    assert commands_answer(ws, **other) == {"status": "succeeded", "wait": 0, "env": 0, "env --json": (0, True),
                                            "verify": 0, "warm": True}
    # Only a tree built from the pin: none of them says yes.
    exact = dict(other, FLYDSL_EXACT_PIN="1")
    answered = commands_answer(ws, **exact)
    assert answered == {"status": "absent", "wait": 1, "env": 1, "env --json": (1, False), "verify": 1,
                        "warm": False}, answered
    # A raised floor: neither.
    raised = {"FLYDSL_MIN_VERSION": "0.2.3"}
    answered = commands_answer(ws, **raised)
    assert answered == {"status": "absent", "wait": 1, "env": 1, "env --json": (1, False), "verify": 1,
                        "warm": False}, answered  # verify: nothing installed answers (it was 6, against the table)
    # The request that built it: still succeeded.
    assert status(ws)["state"] == "succeeded"
