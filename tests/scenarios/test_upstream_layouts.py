"""Every FlyDSL pin as it is: the fixture in each of upstream's shapes (flydsl_fixture.LAYOUTS), built and
checked as a user pinning that tag would.  The LLVM commit is read from llvm-build-info.json as well as
llvm-hash.txt, the MLIR key holds the patch and the profile, and a pin without a required module is refused
before anything is built, with where that module is instead."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Dict, List

import pytest

from tests.helpers.flydsl_fixture import (
    LLVM_HASH_A,
    LLVM_HASH_B,
    LLVM_PATCH,
    LLVM_PATCHES,
    NEXT_PATCHES,
    FixtureRepo,
    counts,
    make_tool_wheel,
)
from tests.helpers.workspace import Workspace, other_python

LLVM_HASH_C = "3333333333333333333333333333333333333333"


def host(tmp_path: "os.PathLike[str]", repo: FixtureRepo, name: str, cache: str = "") -> Workspace:
    ws = Workspace(os.path.join(str(tmp_path), name, "base"), repo)
    # Each pin here must get its own tree: the default, version-only gate would reuse the first pin's.
    ws.env["FLYDSL_EXACT_PIN"] = "1"
    if cache:
        ws.env["FLYDSL_CACHE"] = cache
    return ws


def ok(ws: Workspace, **env: str) -> str:
    """Run ensure; it must succeed; its stderr and log."""
    out = ws.run(**env)
    assert out.returncode == 0, out.stdout + out.stderr
    with open(ws.log) as handle:
        return out.stderr + handle.read()


def mlir_manifests(cache: str) -> List[Dict[str, object]]:
    found = []
    for path in glob.glob(os.path.join(cache, "**", "*.json"), recursive=True):
        try:
            with open(path) as handle:
                data = json.load(handle)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("kind") == "mlir":
            found.append(data)
    return found


def mlir_commits(cache: str) -> List[str]:
    commits = []
    for data in mlir_manifests(cache):
        fields = data.get("fields")
        if isinstance(fields, dict):
            commits.append(str(fields.get("llvm_commit")))
    return sorted(commits)


# -- the LLVM commit, read from the file the pin has --------------------------------------------------------


def test_a_pin_moved_across_llvm_commits_in_llvm_build_info_rebuilds_mlir(tmp_path: "os.PathLike[str]",
                                                                           own_repo: FixtureRepo) -> None:
    """v0.3.1's shape (no llvm-hash.txt): moving one root from P1 (LLVM 1111) to P2 (LLVM 2222) builds MLIR
    again; before, both keys had a null commit, P1's MLIR was reused and build.sh failed (exit 5)."""
    p1 = own_repo.commit("p1", "0.3.1", llvm_hash=LLVM_HASH_A, layout="v0.3.1")
    p2 = own_repo.commit("p2", "0.3.1", llvm_hash=LLVM_HASH_B, layout="v0.3.1")
    ws = host(tmp_path, own_repo, "a")
    ws.env["FLYDSL_STORE"] = "off"  # the MLIR key is under test: with the store, P1's tree comes back from it
    require = "flydsl,kernels.norm.rmsnorm_kernel"
    first = ok(ws, FLYDSL_PIN=p1, FLYDSL_REQUIRE=require)
    assert f"building LLVM/MLIR LLVM {LLVM_HASH_A[:12]} from thirdparty/llvm-build-info.json" in first
    ok(ws, FLYDSL_PIN=p2, FLYDSL_REQUIRE=require)
    assert counts(ws.counter, "llvm") == [LLVM_HASH_A, LLVM_HASH_B]
    # And back: P1's MLIR is not there any more (one llvm-project per base), so it is built again, not
    # taken from P2's.
    ok(ws, FLYDSL_PIN=p1, FLYDSL_REQUIRE=require)
    assert counts(ws.counter, "llvm") == [LLVM_HASH_A, LLVM_HASH_B, LLVM_HASH_A]


def test_two_llvm_commits_on_two_hosts_never_share_an_mlir_entry(tmp_path: "os.PathLike[str]",
                                                                  own_repo: FixtureRepo) -> None:
    cache = os.path.join(str(tmp_path), "cache")
    p1 = own_repo.commit("p1", "0.3.1", llvm_hash=LLVM_HASH_A, layout="v0.3.1")
    p2 = own_repo.commit("p2", "0.3.1", llvm_hash=LLVM_HASH_B, layout="v0.3.1")
    p3 = own_repo.commit("p3", "0.3.1", llvm_hash=LLVM_HASH_A, layout="v0.3.1", files={"kernels/x.py": ""})
    require = "flydsl,kernels.norm.rmsnorm_kernel"
    a, b, c = (host(tmp_path, own_repo, n, cache) for n in "abc")
    ok(a, FLYDSL_PIN=p1, FLYDSL_REQUIRE=require)
    log_b = ok(b, FLYDSL_PIN=p2, FLYDSL_REQUIRE=require)
    assert "cache: fetching MLIR" not in log_b and counts(b.counter, "llvm") == [LLVM_HASH_B]
    assert mlir_commits(cache) == [LLVM_HASH_A, LLVM_HASH_B]
    # The same LLVM commit on a third host is still shared.
    log_c = ok(c, FLYDSL_PIN=p3, FLYDSL_REQUIRE=require)
    assert "cache: fetching MLIR" in log_c and counts(c.counter, "llvm") == []


def test_the_patch_and_the_profile_are_in_the_mlir_key(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    """v0.3.2's shape: the same LLVM commit with another patch, or another LLVM_BUILD_PROFILE, is another MLIR
    (a rebuild here, another cache entry); the profile's value as the build sees it is keyed."""
    cache = os.path.join(str(tmp_path), "cache")
    p1 = own_repo.commit("p1", "0.3.2", llvm_hash=LLVM_HASH_A, layout="v0.3.2")
    p2 = own_repo.commit("p2", "0.3.2", llvm_hash=LLVM_HASH_A, layout="v0.3.2",
                         files={LLVM_PATCH: "--- a/x\n+++ b/x\n@@ another fix @@\n"})
    p3 = own_repo.commit("p3", "0.3.2", llvm_hash=LLVM_HASH_A, layout="v0.3.2",
                         files={LLVM_PATCH: "--- a/x\n+++ b/x\n@@ another fix @@\n", "kernels/y.py": ""})
    p4 = own_repo.commit("p4", "0.3.2", llvm_hash=LLVM_HASH_A, layout="v0.3.2",
                         files={LLVM_PATCH: "--- a/x\n+++ b/x\n@@ another fix @@\n", "kernels/z.py": ""})
    p5 = own_repo.commit("p5", "0.3.2", llvm_hash=LLVM_HASH_A, layout="v0.3.2",
                         files={LLVM_PATCH: "--- a/x\n+++ b/x\n@@ another fix @@\n", "kernels/w.py": ""})
    require = "flydsl,kernels.moe.moe_gemm_2stage"
    ws = host(tmp_path, own_repo, "a", cache)
    first = ok(ws, FLYDSL_PIN=p1, FLYDSL_REQUIRE=require)
    assert f"{LLVM_PATCH} " in first and counts(ws.counter, "llvm") == [LLVM_HASH_A]
    with open(os.path.join(ws.base, "llvm-project", "mlir_install", "llvm-profile.txt")) as handle:
        assert handle.read().strip() == "amd-minimal"  # what FlyDSL needs, unless the caller says otherwise
    ok(ws, FLYDSL_PIN=p2, FLYDSL_REQUIRE=require)
    assert counts(ws.counter, "llvm") == [LLVM_HASH_A] * 2, "another patch: MLIR built again"
    ok(ws, FLYDSL_PIN=p3, FLYDSL_REQUIRE=require, LLVM_BUILD_PROFILE="full")
    assert counts(ws.counter, "llvm") == [LLVM_HASH_A] * 3, "another profile: MLIR built again"
    with open(os.path.join(ws.base, "llvm-project", "mlir_install", "llvm-profile.txt")) as handle:
        assert handle.read().strip() == "full"
    keys = [m["fields"] for m in mlir_manifests(cache)]
    assert len(keys) == 3 and len({json.dumps(k, sort_keys=True) for k in keys}) == 3
    patches = {str(k["files"]) for k in keys if isinstance(k, dict)}  # type: ignore[index]
    assert len(patches) == 2
    profiles = sorted(str(k.get("environment")) for k in keys if isinstance(k, dict))
    assert profiles == ["{'LLVM_BUILD_PROFILE': 'amd-minimal'}"] * 2 + ["{'LLVM_BUILD_PROFILE': 'full'}"]
    # The same inputs again are found: built here before (no build), and for another host in the cache.
    ok(ws, FLYDSL_PIN=p4, FLYDSL_REQUIRE=require, LLVM_BUILD_PROFILE="full")
    assert counts(ws.counter, "llvm") == [LLVM_HASH_A] * 3
    other = host(tmp_path, own_repo, "b", cache)
    assert "cache: fetching MLIR" in ok(other, FLYDSL_PIN=p5, FLYDSL_REQUIRE=require, LLVM_BUILD_PROFILE="full")
    assert counts(other.counter, "llvm") == []


def test_every_patch_in_the_patches_folder_is_in_the_mlir_key(tmp_path: "os.PathLike[str]",
                                                              own_repo: FixtureRepo) -> None:
    """Upstream after the snapshot ("next"): build_llvm.sh applies every patch in thirdparty/llvm-patches/.  A
    patch edited or added there is another MLIR (built again, another cache entry); the same patches again are
    found.  Before, the folder was read as a missing file, so P1's MLIR was reused for P2 and P3."""
    cache = os.path.join(str(tmp_path), "cache")
    first, second = sorted(NEXT_PATCHES)
    p1 = own_repo.commit("p1", "0.3.3", layout="next")
    p2 = own_repo.commit("p2", "0.3.3", layout="next", files={second: "--- a/mlir/x\n+++ b/mlir/x\n@@ v2 @@\n"})
    added = {second: "--- a/mlir/x\n+++ b/mlir/x\n@@ v2 @@\n", f"{LLVM_PATCHES}/0003-added.patch": "--- c\n"}
    p3 = own_repo.commit("p3", "0.3.3", layout="next", files=added)
    p4 = own_repo.commit("p4", "0.3.3", layout="next", files={**added, "kernels/k4.py": ""})
    require = "flydsl,kernels.moe.moe_gemm_2stage"
    ws = host(tmp_path, own_repo, "a", cache)
    log = ok(ws, FLYDSL_PIN=p1, FLYDSL_REQUIRE=require)
    assert f"{first} " in log and f"{second} " in log, log
    for pin, builds in ((p2, 2), (p3, 3), (p4, 3)):
        ok(ws, FLYDSL_PIN=pin, FLYDSL_REQUIRE=require)
        assert counts(ws.counter, "llvm") == [LLVM_HASH_A] * builds, pin
    keys = [m["fields"] for m in mlir_manifests(cache)]
    assert len(keys) == 3 and len({json.dumps(k, sort_keys=True) for k in keys}) == 3
    files = [sorted(k["files"]) for k in keys if isinstance(k, dict)]  # type: ignore[index]
    assert sorted(files) == [sorted(NEXT_PATCHES)] * 2 + [sorted([*NEXT_PATCHES, f"{LLVM_PATCHES}/0003-added.patch"])]


def test_llvm_ref_is_the_commit_and_the_install_location_is_the_tools(tmp_path: "os.PathLike[str]",
                                                                        own_repo: FixtureRepo) -> None:
    """LLVM_REF (a commit hash) is the commit built and keyed; a caller's LLVM_INSTALL_DIR neither moves
    the install away from where the tool reads it nor splits the key."""
    pins = [own_repo.commit(f"p{i}", "0.3.1", llvm_hash=LLVM_HASH_A, layout="v0.3.1", files={f"kernels/k{i}.py": ""})
            for i in range(3)]
    ws = host(tmp_path, own_repo, "a")
    elsewhere = os.path.join(str(tmp_path), "elsewhere")
    require = "flydsl,kernels.norm.rmsnorm_kernel"
    log = ok(ws, FLYDSL_PIN=pins[0], FLYDSL_REQUIRE=require, LLVM_REF=LLVM_HASH_C, LLVM_INSTALL_DIR=elsewhere)
    assert f"LLVM {LLVM_HASH_C[:12]} from LLVM_REF" in log
    assert counts(ws.counter, "llvm") == [LLVM_HASH_C] and not os.path.exists(elsewhere)
    ok(ws, FLYDSL_PIN=pins[1], FLYDSL_REQUIRE=require, LLVM_REF=LLVM_HASH_C, LLVM_INSTALL_DIR=elsewhere + "2")
    assert counts(ws.counter, "llvm") == [LLVM_HASH_C], "the same commit, another install dir: reused"
    ok(ws, FLYDSL_PIN=pins[2], FLYDSL_REQUIRE=require)
    assert counts(ws.counter, "llvm") == [LLVM_HASH_C, LLVM_HASH_A]


@pytest.mark.parametrize("case", ["empty llvm-hash.txt", "LLVM_REF is a branch"])
def test_an_unknown_llvm_commit_is_never_reused_nor_shared(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo,
                                                           case: str) -> None:
    """No key with a null commit: each run builds MLIR, nothing goes to the cache, one warning line says
    why (a branch in LLVM_REF moves, so what it built cannot be named)."""
    cache = os.path.join(str(tmp_path), "cache")
    env = {"FLYDSL_REQUIRE": "flydsl"}
    if case == "LLVM_REF is a branch":
        env["LLVM_REF"] = "main"
        pins = [own_repo.commit(f"p{i}", "0.3.1", layout="v0.3.1", files={f"kernels/k{i}.py": ""}) for i in range(2)]
    else:
        pins = [own_repo.commit(f"p{i}", "0.2.2", llvm_hash="", files={f"kernels/k{i}.py": ""}) for i in range(2)]
    ws = host(tmp_path, own_repo, "a", cache)
    first = ok(ws, FLYDSL_PIN=pins[0], **env)
    warnings = [line for line in first.splitlines() if "cannot be determined" in line]
    assert len(set(warnings)) == 1, first
    if case == "LLVM_REF is a branch":
        assert "LLVM_REF=main is not a 40-digit commit hash" in warnings[0]
    else:
        assert "thirdparty/llvm-hash.txt does not hold a 40-digit commit hash" in warnings[0]
    assert "published the mlir" not in first and "published the tree" not in first
    ok(ws, FLYDSL_PIN=pins[1], **env)
    with open(os.path.join(ws.counter, "llvm.count")) as handle:  # one line a build (empty: no commit)
        assert len(handle.readlines()) == 2
    assert len(counts(ws.counter, "build")) == 2
    assert mlir_manifests(cache) == []
    with open(os.path.join(ws.base, ".llvm-project.ensure-flydsl.json")) as handle:
        assert json.load(handle) == {"created": True, "started": None, "done": None}


def test_the_doctor_reads_the_llvm_inputs_the_pin_has(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    """The doctor names the commit from llvm-build-info.json (before: "an LLVM/MLIR build" with no commit),
    and says MLIR is already built only for the same inputs (the profile too)."""
    pin = own_repo.commit("p", "0.3.2", llvm_hash=LLVM_HASH_B, layout="v0.3.2")
    ws = host(tmp_path, own_repo, "a")
    require = "flydsl,kernels.moe.moe_gemm_2stage"

    def doctor(**env: str) -> Dict[str, object]:
        out = ws.run("doctor", "--json", timeout=90, FLYDSL_PIN=pin, FLYDSL_REQUIRE=require, **env)
        data = json.loads(out.stdout)
        assert isinstance(data, dict)
        return data

    def mlir(data: Dict[str, object]) -> str:
        checks = data["checks"]
        assert isinstance(checks, list)
        check = next(c for c in checks if c["name"] == "mlir")
        return f"[{check['status']}] {check['detail']}"

    before = doctor()
    needs = before["needs"]
    assert isinstance(needs, dict) and needs["llvm_commit"] == LLVM_HASH_B
    said = mlir(before)
    assert said.startswith("[skipped] MLIR_PATH is unset: the run builds LLVM/MLIR (LLVM 222222222222 from "
                           f"thirdparty/llvm-build-info.json, {LLVM_PATCH} "), said
    ok(ws, FLYDSL_PIN=pin, FLYDSL_REQUIRE=require)
    assert mlir(doctor()).startswith("[ok] MLIR for LLVM 222222222222 from thirdparty/llvm-build-info.json")
    other = mlir(doctor(LLVM_BUILD_PROFILE="full"))  # every target: not what the minimal build made
    assert other.startswith("[skipped]") and "LLVM_BUILD_PROFILE=full" in other, other


# -- issue 26 item 11: upstream after the snapshot ("next"): PYTHON_EXECUTABLE, its pip, FLY_BUILD_DIR ------

NEXT_REQUIRE = "flydsl,kernels.moe.moe_gemm_2stage"


def site_listing(python: str) -> List[str]:
    """Every file and folder in the interpreter's site-packages (purelib), with each file's size."""
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    found = []
    for folder, dirs, files in os.walk(purelib):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        found += [os.path.relpath(os.path.join(folder, d), purelib) + "/" for d in dirs]
        found += [f"{os.path.relpath(os.path.join(folder, f), purelib)} {os.path.getsize(os.path.join(folder, f))}"
                  for f in files]
    assert found, purelib
    return sorted(found)


def test_the_next_layouts_pip_install_goes_to_the_private_folder_not_the_target(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    """build_llvm.sh runs `"$PYTHON_EXECUTABLE" -m pip install ...`: it lands in the tool's private folder and
    the target's site-packages is as it was.  Before, PYTHON_EXECUTABLE was python3 (the target) and its pip
    installed into the target's site-packages: the `pip` shim on PATH is not asked."""
    pin = own_repo.commit("next", "0.3.3", layout="next")
    wheels = make_tool_wheel(str(tmp_path))
    python = os.path.join(str(tmp_path), "target", "bin", "python")
    subprocess.run([sys.executable, "-m", "venv", os.path.dirname(os.path.dirname(python))], check=True)
    before = site_listing(python)
    ws = host(tmp_path, own_repo, "a")
    log = ok(ws, FLYDSL_PIN=pin, FLYDSL_REQUIRE=NEXT_REQUIRE, FLYDSL_PYTHON=python,
             FIXTURE_PIP_INSTALL=f"--no-index --find-links {wheels} fixture-tool")
    pylib = os.path.join(ws.root, ".ensure_flydsl", "tools", "pylib")
    assert f"fixture_tool from {pylib}/fixture_tool.py" in log, log
    assert os.path.isfile(os.path.join(pylib, "fixture_tool.py"))
    assert site_listing(python) == before
    assert f"PYTHON_EXECUTABLE is {python}" in log


def test_the_build_is_for_the_target_whatever_the_callers_python_executable_says(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo) -> None:
    """Both scripts of the newer layout build for PYTHON_EXECUTABLE: the tool sets it to the target, so a
    caller's own (an image exporting it for another Python) does not pick the build's interpreter.  Before:
    LLVM and FlyDSL were built for the caller's, and the probe refused the tree (exit 6)."""
    other = other_python(sys.implementation.cache_tag)
    if other is None:
        pytest.skip("needs an interpreter of another Python version")
    pin = own_repo.commit("next", "0.3.3", layout="next")
    ws = host(tmp_path, own_repo, "a")
    log = ok(ws, FLYDSL_PIN=pin, FLYDSL_REQUIRE=NEXT_REQUIRE, PYTHON_EXECUTABLE=other)
    said = {line.split(" is ", 1)[0]: line.split(" is ", 1)[1].strip() for line in log.splitlines()
            if line.startswith(("PYTHON_EXECUTABLE is ", "LLVM python is ", "build python is "))}
    assert set(said) == {"PYTHON_EXECUTABLE", "LLVM python", "build python"}, log
    assert {os.path.realpath(p) for p in said.values()} == {os.path.realpath(sys.executable)}, said
    with open(os.path.join(ws.base, "llvm-project", "mlir_install", "python-tag.txt")) as handle:
        assert handle.read().strip() == sys.implementation.cache_tag


@pytest.mark.parametrize("layout", ["v0.2.2", "next"])
def test_fly_build_dir_is_the_tools_build_folder(tmp_path: "os.PathLike[str]", own_repo: FixtureRepo,
                                                 layout: str) -> None:
    """Every FlyDSL's build.sh builds into FLY_BUILD_DIR when it is set (the newer sources suggest one build
    folder per Python).  The tool sets it to the root's build-fly, one interpreter's (the build stamp names it),
    takes the package from there and exports it; a caller's own FLY_BUILD_DIR moves nothing.  Before, the
    build went to the caller's folder and the tool found no package (exit 5)."""
    pin = own_repo.commit(layout, "0.3.3", layout=layout)
    ws = host(tmp_path, own_repo, "a")
    elsewhere = os.path.join(str(tmp_path), "build-py-elsewhere")
    require = NEXT_REQUIRE if layout == "next" else "flydsl,kernels.moe_gemm_2stage"
    log = ok(ws, FLYDSL_PIN=pin, FLYDSL_REQUIRE=require, FLY_BUILD_DIR=elsewhere)
    built = [line.split(": ", 1)[1].strip() for line in log.splitlines() if line.startswith("BUILD_DIR: ")]
    assert built == [os.path.join(ws.root, "build-fly")], log
    packages = os.path.join(built[0], "python_packages")
    assert not os.path.exists(elsewhere)
    assert ws.env_twin()["pythonpath_prepend"] == [ws.root, packages]
    with open(ws.env_file) as handle:
        assert packages in handle.read()
    env = {k: v for k, v in ws.env.items() if k != "PYTHONPATH"}
    imported = subprocess.run(["bash", "-c", f'. "$1" && {sys.executable} -c "import flydsl; print(flydsl.__file__)"',
                               "bash", ws.env_file], env=env, text=True, stdout=subprocess.PIPE, check=True)
    assert imported.stdout.strip() == os.path.join(packages, "flydsl", "__init__.py")


# -- a required module the pin does not have ---------------------------------------------------------------


def refused(ws: Workspace, pin: str) -> str:
    out = ws.run(FLYDSL_PIN=pin)
    assert out.returncode == 6, out.stdout + out.stderr
    assert "stage requirements" in out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 6 and marker["stage"] == "requirements"
    assert ws.count("llvm") == 0 and ws.count("build") == 0
    assert not os.path.exists(os.path.join(ws.base, "llvm-project")) and not os.path.exists(ws.env_file)
    return str(marker["reason"]) + "\n" + out.stderr


@pytest.mark.parametrize("layout,where", [("v0.2.3", "kernels/moe/moe_gemm_2stage.py"),
                                          ("v0.3.0", "kernels/moe/moe_gemm_2stage/__init__.py"),
                                          ("v0.3.2", "kernels/moe/moe_gemm_2stage/__init__.py")])
def test_a_moved_required_module_is_refused_before_building_with_where_it_is(
        tmp_path: "os.PathLike[str]", own_repo: FixtureRepo, layout: str, where: str) -> None:
    own_repo.commit("moved", "0.3.0", layout=layout, tag="v9.9.9")
    ws = host(tmp_path, own_repo, "a")
    said = refused(ws, "v9.9.9")
    assert (f"kernels.moe_gemm_2stage is not in v9.9.9; {where} is: set "
            "FLYDSL_REQUIRE=flydsl,kernels.moe.moe_gemm_2stage") in said
    # The doctor says the same, blocking, before any checkout.
    doctor = host(tmp_path, own_repo, "d")
    out = doctor.run("doctor", "--json", timeout=90, FLYDSL_PIN="v9.9.9")
    data = json.loads(out.stdout)
    check = next(c for c in data["checks"] if c["name"] == "requirements")
    assert check["status"] == "missing" and check["blocking"] and out.returncode == 6
    assert f"kernels.moe_gemm_2stage is not in v9.9.9; {where} is" in check["detail"]
    assert "FLYDSL_REQUIRE=flydsl,kernels.moe.moe_gemm_2stage" in check["remedy"]
    # Following the advice builds it.
    os.unlink(ws.fail_marker)
    ok(ws, FLYDSL_PIN="v9.9.9", FLYDSL_REQUIRE="flydsl,kernels.moe.moe_gemm_2stage")


def test_a_removed_required_module_is_refused_and_so_said(tmp_path: "os.PathLike[str]",
                                                          own_repo: FixtureRepo) -> None:
    pin = own_repo.commit("gone", "0.3.1", layout="v0.3.1")
    ws = host(tmp_path, own_repo, "a")
    said = refused(ws, pin)
    assert f"kernels.moe_gemm_2stage is not in {pin} (no module named moe_gemm_2stage anywhere in its kernels)" \
        in said
    assert "FLYDSL_REQUIRE=flydsl" in said and "pin a commit that has kernels.moe_gemm_2stage" in said


def test_a_module_only_the_build_makes_is_not_refused(ws: Workspace) -> None:
    """flydsl._mlir is not in the sources: the build makes it (the default layout, pin dev)."""
    ok(ws, FLYDSL_REQUIRE="flydsl,flydsl._mlir,kernels.moe_gemm_2stage")


# -- issue 19 item 12: the preflight must not refuse pins that work ------------------------------------------


WORKING_KERNEL = '''"""A helper module at the checkout's top, and an import the ``with`` makes optional."""
import contextlib

import fly_top_helpers  # at the checkout's top: the env file's PYTHONPATH has it
import flydsl._mlir._mlir_libs._mlir  # noqa: F401

with contextlib.suppress(ImportError):
    import ensure_flydsl_not_installed_anywhere  # noqa: F401
'''


def test_a_top_level_module_and_a_suppressed_import_are_not_requirements(tmp_path: "os.PathLike[str]",
                                                                          own_repo: FixtureRepo) -> None:
    pin = own_repo.commit("works", "0.2.2", files={"kernels/moe_gemm_2stage.py": WORKING_KERNEL,
                                                   "fly_top_helpers.py": "import json\nVALUE = 1\n"})
    ws = host(tmp_path, own_repo, "a")
    log = ok(ws, FLYDSL_PIN=pin)
    assert "requirements: the pin's code (4 files read" in log, log
    script = f'. "$1" && {sys.executable} -c "import kernels.moe_gemm_2stage, fly_top_helpers; print(1 + 1)"'
    env = {k: v for k, v in ws.env.items() if k != "PYTHONPATH"}
    imported = subprocess.run(["bash", "-c", script, "bash", ws.env_file], env=env, text=True, cwd="/",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert imported.returncode == 0 and imported.stdout.strip() == "2", imported.stderr
    # The doctor, reading the commit with git, agrees.
    doctor = host(tmp_path, own_repo, "d")
    out = doctor.run("doctor", "--json", timeout=90, FLYDSL_PIN=pin)
    check = next(c for c in json.loads(out.stdout)["checks"] if c["name"] == "requirements")
    assert check["status"] == "ok", check
    assert "read from repository" in check["detail"] and "4 files" in check["detail"], check


# -- the real repository (skipped unless ENSURE_FLYDSL_REAL_REPO points at a clone of ROCm/FlyDSL) ---------

REAL = os.environ.get("ENSURE_FLYDSL_REAL_REPO")
REAL_TAGS = [
    # tag, LLVM commit (short), the file it is read from, patches, where kernels.moe_gemm_2stage is instead
    ("v0.2.2", "7f77ca0dbda4", "thirdparty/llvm-hash.txt", 0, None),
    ("v0.2.3", "7f77ca0dbda4", "thirdparty/llvm-hash.txt", 0, "kernels/moe/moe_gemm_2stage.py"),
    ("v0.2.5.dev732", "e2a39f504fee", "thirdparty/llvm-build-info.json", 0, "kernels/moe/moe_gemm_2stage.py"),
    ("v0.3.0", "7f77ca0dbda4", "thirdparty/llvm-hash.txt", 0, "kernels/moe/moe_gemm_2stage/__init__.py"),
    ("v0.3.1", "e2a39f504fee", "thirdparty/llvm-build-info.json", 0, ""),
    ("v0.3.2.dev838", "e2a39f504fee", "thirdparty/llvm-build-info.json", 1, "kernels/moe/moe_gemm_2stage/__init__.py"),
]


@pytest.mark.skipif(not REAL, reason="ENSURE_FLYDSL_REAL_REPO is not set")
@pytest.mark.parametrize("tag,commit,source,patches,instead", REAL_TAGS)
def test_the_real_tags_as_read(tag: str, commit: str, source: str, patches: int, instead: "str | None") -> None:
    from ensure_flydsl.source.git import CommitFiles, resolve_in
    from ensure_flydsl.source.needs import pin_llvm_inputs
    from ensure_flydsl.source.requirements import absent_modules, read_sources

    assert REAL is not None
    sha = resolve_in(REAL, tag)
    assert sha is not None
    inputs = pin_llvm_inputs(CommitFiles(REAL, sha), {"LLVM_BUILD_PROFILE": "amd-minimal"})
    assert inputs.commit is not None and inputs.commit[:12] == commit and inputs.commit_from == source
    assert len(inputs.files) == patches and all(digest for _, digest in inputs.files)
    # Upstream's amd-minimal profile where the script has one (given here by the caller), else the tool's targets.
    assert inputs.environment == ((("LLVM_BUILD_PROFILE", "amd-minimal"),) if patches else ()) + inputs.minimal
    assert inputs.minimal == (() if patches else (("LLVM_TARGETS_TO_BUILD", "X86;AMDGPU"),))
    absent = absent_modules(("flydsl", "kernels.moe_gemm_2stage"), read_sources(CommitFiles(REAL, sha)))
    if instead is None:
        assert absent == []
    else:
        assert [a.module for a in absent] == ["kernels.moe_gemm_2stage"]
        assert [path for _, path in absent[0].instead] == ([instead] if instead else [])
