"""The release way however the tool was installed: with `uv tool install` (no pip in the tool's own
environment) the wheel is downloaded by the target interpreter's pip; with no pip anywhere the run says why
instead of falling back silently (auto: one line, then the source build; release: exit 8 naming what is
missing and the remedy), and the doctor, asking through the same pip, predicts it.  A real `uv tool install`
of this worktree, a real venv without pip, the real flydsl 0.2.2 wheel from a wheelhouse."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from typing import Dict

import pytest

from tests.helpers.build_fixtures import cmake_lists, commit_build_files, make_fake_mlir
from tests.helpers.flydsl_fixture import FixtureRepo, add_submodule, git
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

pytestmark = pytest.mark.index  # the real flydsl wheel, and the tool's own dependencies for uv

WORKTREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def offline(wheelhouse: str) -> Dict[str, str]:
    """pip's own settings: the wheelhouse only (as a user's private wheelhouse would be set up)."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "auto"}


def run_tool(tool: str, ws: Workspace, *args: str, **env: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([tool, *args], env=dict(ws.env, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=300, check=False)


def test_uv_tool_install_takes_the_release_wheel_through_the_targets_pip(
        tmp_path: "os.PathLike[str]", release_repo: FixtureRepo, wheelhouse: str, uv_tool: str) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), release_repo)
    out = run_tool(uv_tool, ws, "--json", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "released" and result["version"] == "0.2.2"  # before: "built" (no pip: fell back)
    assert ws.count("build") == 0 and ws.count("llvm") == 0
    with open(ws.log) as handle:
        assert f"$ {sys.executable} -m pip download --no-deps" in handle.read()  # the target's own pip
    assert_one_tree(ws)


def test_uv_tool_doctor_asks_the_index_through_the_same_pip(
        tmp_path: "os.PathLike[str]", release_repo: FixtureRepo, wheelhouse: str, uv_tool: str) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), release_repo)
    out = run_tool(uv_tool, ws, "doctor", "--json", FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    assert out.returncode == 0, out.stdout + out.stderr
    wheel = next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "release-wheel")
    assert wheel["status"] == "ok" and "has a flydsl 0.2.2 wheel" in wheel["detail"], wheel


def no_pip_reason(target: str, tool: str) -> str:
    tool_python = os.path.join(os.path.dirname(os.path.realpath(tool)), "python")  # the tool's own venv
    return (f"there is no pip to download the wheel with: neither FLYDSL_PYTHON={target} nor ensure-flydsl's own "
            f"interpreter {tool_python} has pip (an install by `uv tool install` has none); give FLYDSL_PYTHON pip "
            f"(`{target} -m ensurepip --upgrade`, or `uv pip install --python {target} pip`)")


def test_no_pip_anywhere_auto_says_why_in_one_line_then_builds(
        ws: Workspace, wheelhouse: str, uv_tool: str, python_without_pip: str) -> None:
    out = run_tool(uv_tool, ws, "--json", FLYDSL_PIN="v0.2.2", FLYDSL_PYTHON=python_without_pip, **offline(wheelhouse))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    said = [json.loads(line)["text"] for line in out.stderr.splitlines() if '"message"' in line]
    assert f"no release wheel to use ({no_pip_reason(python_without_pip, uv_tool)}); building the pin from source " \
        "instead" in said, said


def test_no_pip_anywhere_release_is_exit_8_naming_what_is_missing(
        ws: Workspace, wheelhouse: str, uv_tool: str, python_without_pip: str) -> None:
    env = dict(offline(wheelhouse), FLYDSL_STRATEGY="release", FLYDSL_PIN="v0.2.2", FLYDSL_PYTHON=python_without_pip)
    out = run_tool(uv_tool, ws, **env)
    assert out.returncode == 8, out.stderr
    marker = ws.marker()
    assert marker["stage"] == "release" and marker["exit_code"] == 8
    assert marker["reason"] == no_pip_reason(python_without_pip, uv_tool)
    assert "FLYDSL_STRATEGY=source" in str(marker["hint"])
    doctor = run_tool(uv_tool, ws, "doctor", "--json", **env)  # predicts it, through the same question
    assert doctor.returncode == 8, doctor.stdout + doctor.stderr
    wheel = next(c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "release-wheel")
    assert wheel["status"] == "missing" and wheel["blocking"]
    assert no_pip_reason(python_without_pip, uv_tool) in wheel["detail"]


def test_doctor_does_not_block_a_release_pin_on_submodules_only_a_source_build_fetches(
        ws: Workspace, own_repo: FixtureRepo, wheelhouse: str, tmp_path: "os.PathLike[str]") -> None:
    """A fresh root, pin v0.2.2 whose submodule cannot be fetched: auto installs the wheel, so the doctor
    says it can succeed (it said "cannot succeed", exit 2, and ensure then succeeded)."""
    sub = os.path.join(str(tmp_path), "dlpack.git")
    add_submodule(own_repo, sub, "with-sub")
    git(own_repo.path, "tag", "-f", "v0.2.2")
    git(sub, "rev-parse", "HEAD")
    subprocess.run(["rm", "-rf", sub], check=True)  # unreachable from here on
    out = ws.run("doctor", "--json", FLYDSL_REPO=own_repo.url, FLYDSL_PIN="v0.2.2", **offline(wheelhouse))
    data = json.loads(out.stdout)
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["submodules"]["status"] == "missing", checks["submodules"]
    assert not checks["submodules"]["blocking"]
    assert "only for a source build: auto installs the release wheel" in checks["submodules"]["remedy"]
    assert checks["release-wheel"]["status"] == "ok"
    assert out.returncode == 0 and data["ok"], data["verdict"]


def test_auto_that_cannot_build_names_a_release_with_a_wheel(ws: Workspace, wheelhouse: str) -> None:
    """The build fails (exit 5) under auto for a pin that is no release: the hint names the newest release
    >= the floor that the repository tags and the index has a wheel of for this interpreter."""
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", **offline(wheelhouse))
    assert out.returncode == 5, out.stderr
    suggestion = ("FLYDSL_PIN=v0.2.2 has a wheel for this interpreter and its tag holds kernels.moe_gemm_2stage: "
                  "about 10 s, nothing built")
    assert suggestion in str(ws.marker()["hint"]) and suggestion in out.stderr
    # an index with no wheel for it: no such hint
    empty = os.path.join(os.path.dirname(wheelhouse), "empty-wheelhouse")
    os.makedirs(empty, exist_ok=True)
    out = ws.run(FIXTURE_BUILD_HOOK="exit 1", **dict(offline(wheelhouse), PIP_FIND_LINKS=empty))
    assert out.returncode == 5 and "has a wheel for this interpreter" not in out.stderr


def test_the_doctor_predicts_the_release_hint_when_auto_cannot_build(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, wheelhouse: str) -> None:
    """The doctor predicts what ensure does: auto's source build is blocked (no HIP here, and the pin needs
    it), so its verdict names the release ensure's failure would name; with no wheel, no such line."""
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    env = dict(offline(wheelhouse), FLYDSL_PIN=own_repo.commits["hip"],
               MLIR_PATH=make_fake_mlir(os.path.join(str(tmp_path), "mlir")))
    out = ws.run("doctor", "--json", timeout=120, **env)
    data = json.loads(out.stdout)
    suggestion = ("FLYDSL_PIN=v0.2.2 has a wheel for this interpreter and its tag holds kernels.moe_gemm_2stage: "
                  "about 10 s, nothing built; but it is not the pin: the pin is 4 commits beyond v0.2.2, 2 of them in "
                  "compiled code (outside the Python package and kernels/): ")  # dev, v0.2.3, llvm-b, hip
    assert out.returncode == 5 and data["exit_code"] == 5 and not data["ok"], data["verdict"]
    assert data["suggestion"].startswith(suggestion) and data["suggestion"].endswith(" llvm-b: version 0.2.3")
    suggestion = data["suggestion"]
    assert data["verdict"].endswith(f"(a run would stop at its build step, exit 5); or, without a build, {suggestion}")
    out = ws.run("doctor", timeout=120, **env)
    assert out.returncode == 5 and f"or, without a build, {suggestion}" in out.stdout
    empty = os.path.join(str(tmp_path), "empty-wheelhouse")
    os.makedirs(empty)
    data = json.loads(ws.run("doctor", "--json", timeout=120, **dict(env, PIP_FIND_LINKS=empty)).stdout)
    assert data["suggestion"] is None and "without a build" not in data["verdict"]
    assert not os.path.exists(ws.root)  # the doctor creates nothing


def test_the_release_hint_never_waits_long_for_a_silent_index(ws: Workspace) -> None:
    from tests.helpers.stall_server import stall_server

    with stall_server("silent") as server:
        started = time.monotonic()
        out = ws.run(FIXTURE_BUILD_HOOK="exit 1", FLYDSL_STRATEGY="auto", PIP_NO_INDEX="", PIP_FIND_LINKS="",
                     PIP_INDEX_URL=f"http://127.0.0.1:{server.port}/simple", PIP_CONFIG_FILE=os.devnull)
        seconds = time.monotonic() - started
        assert server.accepted >= 1  # it was asked
    assert out.returncode == 5, out.stderr
    assert "has a wheel for this interpreter" not in out.stderr
    assert seconds < 40, seconds  # the hint's question is bounded (20 s), not pip's minutes of retries


def test_uv_tool_a_missing_extra_names_uv_s_remedy_and_it_works(uv_tool: str, ws: Workspace) -> None:
    """The remedy of a tool installed with `uv tool install` is uv's own (pip and `ensure-flydsl[s3]` are dead
    ends there: no pip in its environment, no such package on the index), and following it works."""
    key = "ci:" + "A" * 43 + "="
    refused = run_tool(uv_tool, ws, "env", FLYDSL_CACHE_TRUSTED_KEYS=key)
    assert refused.returncode == 64 and refused.stderr.count("\n") == 1, refused.stderr
    remedy = refused.stderr.split("install the 'signing' extra into the tool's environment: ", 1)[1].split("; or")[0]
    assert remedy == f"uv tool install --reinstall --with 'cryptography>=42' --from {WORKTREE} ensure-flydsl"
    s3 = run_tool(uv_tool, ws, "env", FLYDSL_CACHE="s3://bucket/prefix")
    assert s3.returncode == 64 and "--with 's3fs>=2025.5.0'" in s3.stderr and "pip install" not in s3.stderr
    from uv import find_uv_bin

    tool_env = os.path.dirname(os.path.dirname(os.path.realpath(uv_tool)))  # .../tools/ensure-flydsl
    env = dict(os.environ, UV_TOOL_DIR=os.path.dirname(tool_env), UV_TOOL_BIN_DIR=os.path.dirname(uv_tool),
               UV_CACHE_DIR=os.path.join(os.path.dirname(os.path.dirname(tool_env)), "cache"))
    followed = subprocess.run([find_uv_bin(), "--quiet", *shlex.split(remedy)[1:]], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600, check=False)
    assert followed.returncode == 0, followed.stdout[-3000:]
    accepted = run_tool(uv_tool, ws, "env", FLYDSL_CACHE_TRUSTED_KEYS=key)
    assert accepted.returncode != 64, accepted.stderr
