"""ROCm installed from the package index: when ROCM_PATH (default /opt/rocm) has no hip CMake package, the
doctor and the build use the prefix ``rocm-sdk path --root`` prints (the command TheRock's wheels install
beside the interpreter; FlyDSL's CI builds that way), and say which ROCm they used."""

from __future__ import annotations

import json
import os
from typing import Dict

import pytest

from tests.helpers.build_fixtures import (
    RUNTIME_VERSION,
    cmake_lists,
    commit_build_files,
    make_fake_mlir,
    make_fake_rocm,
)
from tests.helpers.flydsl_fixture import FixtureRepo, write
from tests.helpers.workspace import Workspace


def rocm_sdk(folder: str, prints: str, status: int = 0) -> str:
    """A ``rocm-sdk`` command in ``folder`` that answers ``path --root`` and counts its calls."""
    write(os.path.join(folder, "rocm-sdk"),
          f'#!/bin/sh\necho "$*" >> "{folder}/calls"\n[ "$1 $2" = "path --root" ] || exit 2\n'
          f'echo "{prints}"\nexit {status}\n', 0o755)
    return folder


def calls(folder: str) -> int:
    try:
        with open(os.path.join(folder, "calls")) as handle:
            return len(handle.readlines())
    except FileNotFoundError:
        return 0


@pytest.fixture
def hip_ws(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> Workspace:
    """A pin whose CMake files do find_package(hip REQUIRED); no ROCm at ROCM_PATH."""
    sha = commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    ws = Workspace(os.path.join(str(tmp_path), "base"), own_repo)
    ws.env["FLYDSL_PIN"] = sha
    ws.env["MLIR_PATH"] = make_fake_mlir(os.path.join(ws.base, "mlir"))
    return ws


def hip_check(ws: Workspace, **env: str) -> Dict[str, object]:
    out = ws.run("doctor", "--json", timeout=90, **env)
    data = json.loads(out.stdout)
    return dict(next(c for c in data["checks"] if c["name"] == "hip"), exit_code=out.returncode)


def test_the_doctor_finds_rocm_from_the_package_index_and_says_so(tmp_path: "os.PathLike[str]",
                                                                   hip_ws: Workspace) -> None:
    prefix = make_fake_rocm(os.path.join(str(tmp_path), "venv-rocm"), named=RUNTIME_VERSION)
    bin_dir = rocm_sdk(os.path.join(str(tmp_path), "bin"), prefix)
    path = bin_dir + os.pathsep + hip_ws.env["PATH"]
    check = hip_check(hip_ws, PATH=path)
    assert check["status"] == "ok", check
    assert f"{prefix}/lib/cmake/hip" in str(check["detail"])
    assert (f"ROCm: {prefix} (ROCm from the package index: `{bin_dir}/rocm-sdk path --root`; "
            f"ROCM_PATH={hip_ws.env['ROCM_PATH']} has no hip CMake package)") in str(check["detail"])
    assert calls(bin_dir) == 1
    # A ROCM_PATH that has the package wins; rocm-sdk is not even asked.
    own = make_fake_rocm(os.path.join(str(tmp_path), "opt-rocm"), named=RUNTIME_VERSION)
    check = hip_check(hip_ws, PATH=path, ROCM_PATH=own)
    assert check["status"] == "ok" and f"{own}/lib/cmake/hip" in str(check["detail"]), check
    assert "package index" not in str(check["detail"]) and calls(bin_dir) == 1


@pytest.mark.parametrize("how,said", [
    ("absent", "no rocm-sdk command (ROCm from the package index) beside the interpreter or on PATH"),
    ("fails", "path --root` exited with 1"),
    ("no hip", "which has no hip CMake package either"),
])
def test_without_a_usable_rocm_sdk_the_doctor_says_what_it_tried(tmp_path: "os.PathLike[str]", hip_ws: Workspace,
                                                                 how: str, said: str) -> None:
    bin_dir = os.path.join(str(tmp_path), "bin")
    os.makedirs(bin_dir)
    if how == "fails":
        rocm_sdk(bin_dir, "", status=1)
    elif how == "no hip":
        rocm_sdk(bin_dir, make_fake_rocm(os.path.join(str(tmp_path), "r"), with_hip_package=False))
    check = hip_check(hip_ws, PATH=bin_dir + os.pathsep + hip_ws.env["PATH"])
    assert check["status"] == "missing" and check["blocking"] and check["exit_code"] == 5, check
    assert "no hip CMake package (lib/cmake/hip) under ROCM_PATH=" in str(check["detail"])
    assert said in str(check["detail"]), check
    assert "`rocm-sdk path --root` is used then" in str(check["remedy"])


def test_the_build_uses_the_rocm_the_doctor_found(tmp_path: "os.PathLike[str]", ws: Workspace) -> None:
    prefix = make_fake_rocm(os.path.join(str(tmp_path), "venv-rocm"), named=RUNTIME_VERSION)
    bin_dir = rocm_sdk(os.path.join(str(tmp_path), "bin"), prefix)
    out = ws.run(PATH=bin_dir + os.pathsep + ws.env["PATH"],
                 FIXTURE_BUILD_HOOK='echo "build.sh sees ROCM_PATH=$ROCM_PATH"')
    assert out.returncode == 0, out.stderr
    with open(ws.log) as handle:
        log = handle.read()
    assert f"build.sh sees ROCM_PATH={prefix}" in log
    assert f"ROCm: {prefix} (ROCm from the package index: `{bin_dir}/rocm-sdk path --root`" in log
