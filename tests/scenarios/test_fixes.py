"""The hip CMake library-name fix, against a fake ROCm tree and the real cmake.

The fake ROCm's hip package names libamdhip64.so.7.2.70201 while the real (compiled) library is
libamdhip64.so.7.2.53211: a real configure of a project doing find_package(hip REQUIRED CONFIG) fails against
it with CMake's own import check, and succeeds with the private overlay first on CMAKE_PREFIX_PATH, while
every file and link of the fake ROCm stays byte-identical.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Dict, List, Optional

import pytest

from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.layout import overlay_stamp
from ensure_flydsl.ways.source.environment import check_hip, drop_stale_hip_dir, fix_hip
from tests.helpers.build_fixtures import (
    NAMED_VERSION,
    RUNTIME_VERSION,
    make_fake_rocm,
    make_hip_user_project,
    tree_fingerprint,
)

needs_cmake = pytest.mark.skipif(
    not (shutil.which("cmake") and (shutil.which("cc") or shutil.which("gcc")) and shutil.which("c++")),
    reason="needs cmake and a C/C++ compiler",
)
MISSING = f"libamdhip64.so.{NAMED_VERSION}"


def configure(project: str, build: str, prefix_path: List[str], extra: Optional[Dict[str, str]] = None,
              *, rocm: Optional[str] = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CMAKE_PREFIX_PATH", "ROCM_PATH", "hip_DIR")}
    env["CMAKE_PREFIX_PATH"] = os.pathsep.join(prefix_path)
    if rocm:
        env["ROCM_PATH"] = rocm
    env.update(extra or {})
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    return subprocess.run(["cmake", *generator, "-S", project, "-B", build, "-DHIP_PLATFORM=amd"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)


@pytest.fixture
def rocm(tmp_path: "os.PathLike[str]") -> str:
    return make_fake_rocm(os.path.join(str(tmp_path), "opt", "rocm"))


def test_check_hip_sees_the_missing_name_and_the_real_library(rocm: str) -> None:
    check = check_hip(rocm)
    assert check.package_dir == os.path.join(rocm, "lib", "cmake", "hip")
    assert check.referenced == (MISSING,) and check.missing == (MISSING,)
    assert check.actual == os.path.join(rocm, "lib", f"libamdhip64.so.{RUNTIME_VERSION}")
    assert check.needs_fix and not check.unfixable


@needs_cmake
def test_real_configure_fails_on_broken_rocm_and_succeeds_with_the_overlay(rocm: str, tmp_path: "os.PathLike[str]"
                                                                           ) -> None:
    base = str(tmp_path)
    before = tree_fingerprint(os.path.dirname(rocm))
    project = make_hip_user_project(os.path.join(base, "project"))

    broken = configure(project, os.path.join(base, "b-broken"), [rocm], rocm=rocm)
    assert broken.returncode != 0
    assert 'The imported target "hip::amdhip64" references the file' in broken.stdout
    assert MISSING in broken.stdout and "but this file does not exist" in broken.stdout

    overlay = os.path.join(base, "tools", "rocm-overlay")
    fix = fix_hip(rocm, overlay)
    assert fix.cmake_prefixes == (overlay,) and fix.changed
    assert "left untouched" in fix.message and MISSING in fix.message
    fixed = configure(project, os.path.join(base, "b-fixed"), list(fix.cmake_prefixes) + [rocm], rocm=rocm)
    assert fixed.returncode == 0, fixed.stdout
    built = subprocess.run(["cmake", "--build", os.path.join(base, "b-fixed")], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, check=False)
    assert built.returncode == 0, built.stdout
    library = os.path.join(base, "b-fixed", "libhipuser.so")
    if shutil.which("readelf"):
        dynamic = subprocess.run(["readelf", "-d", library], stdout=subprocess.PIPE, text=True, check=True).stdout
        assert "[libamdhip64.so.7]" in dynamic  # linked against the real runtime, by its soname

    # FlyDSL's own call names ROCm in PATHS (find_package(hip REQUIRED CONFIG PATHS /opt/rocm*)):
    # CMAKE_PREFIX_PATH is searched first, so the overlay still wins.
    with_paths = os.path.join(base, "project-paths")
    make_hip_user_project(with_paths)
    text = open(os.path.join(with_paths, "CMakeLists.txt")).read()
    with open(os.path.join(with_paths, "CMakeLists.txt"), "w") as handle:
        handle.write(text.replace("REQUIRED CONFIG)", f'REQUIRED CONFIG PATHS "{rocm}")'))
    # (With no prefix at all it fails earlier, on hip's own find_dependency(amd_comgr): ROCm on the prefix
    # path shows the failure the overlay fixes.)
    with_rocm = configure(with_paths, os.path.join(base, "b-paths"), [rocm], rocm=rocm)
    assert fails_on_the_missing_library(with_rocm, rocm), with_rocm.stdout
    assert configure(with_paths, os.path.join(base, "b-paths-fixed"), [overlay], rocm=rocm).returncode == 0

    assert tree_fingerprint(os.path.dirname(rocm)) == before  # every file and link of ROCm untouched


def test_overlay_is_idempotent_and_follows_changes_of_rocm(rocm: str, tmp_path: "os.PathLike[str]") -> None:
    overlay = os.path.join(str(tmp_path), "overlay")
    before = tree_fingerprint(rocm)
    first = fix_hip(rocm, overlay)
    shutil.rmtree(overlay)
    # An overlay removed behind our back (or a rebuild interrupted) is made again.
    assert fix_hip(rocm, overlay).changed and os.path.islink(os.path.join(overlay, "lib", MISSING))
    snapshot = tree_fingerprint(overlay)
    again = fix_hip(rocm, overlay)
    assert first.changed and not again.changed and "using a private corrected copy" in again.message
    assert tree_fingerprint(overlay) == snapshot
    assert os.path.realpath(os.path.join(overlay, "lib", MISSING)) == check_hip(rocm).actual
    assert os.path.islink(os.path.join(overlay, "include")) and not os.path.islink(
        os.path.join(overlay, "lib", "cmake", "hip"))
    assert not os.path.lexists(os.path.join(overlay, "llvm"))  # ROCm's LLVM is kept off CMAKE_PREFIX_PATH
    assert tree_fingerprint(rocm) == before

    # ROCm gains a library: the overlay is rebuilt and links it too.
    with open(os.path.join(rocm, "lib", "librocblas.so.4"), "wb") as handle:
        handle.write(b"\x7fELF")
    changed = fix_hip(rocm, overlay)
    assert changed.changed and os.path.islink(os.path.join(overlay, "lib", "librocblas.so.4"))


@pytest.mark.parametrize("planted", ["[1, 2]", "{torn", '{"key": "x"}', '{}', "key: relative rocm_path",
                                     "key: a name with a slash", "key: a digest that is no sha256",
                                     "key: a negative size", "key: a relative real library"])
def test_a_planted_overlay_stamp_is_ignored_said_in_the_fix_line_and_the_overlay_made_again(
        rocm: str, tmp_path: "os.PathLike[str]", planted: str) -> None:
    """The overlay's stamp says what it was made for; one that is not a stamp the tool writes (torn, not an
    object, a value no run records) is treated as absent: the overlay is made again from ROCm and the fix's
    one line says the stamp was ignored.  The stamp it writes instead is taken on the next call."""
    overlay = os.path.join(str(tmp_path), "overlay")
    assert fix_hip(rocm, overlay).changed
    stamp = overlay_stamp(overlay)
    with open(stamp) as handle:
        key = json.load(handle)["key"]
    changes = {"key: relative rocm_path": {"rocm_path": "opt/rocm"}, "key: a name with a slash":
               {"entries": ["lib/../x"]}, "key: a digest that is no sha256": {"lib": "A" * 64},
               "key: a negative size": {"package": [["hip-config.cmake", -1, 0]]},
               "key: a relative real library": {"actual": "libamdhip64.so"}}
    text = json.dumps({"key": dict(key, **changes[planted])}) if planted in changes else planted
    with open(stamp, "w") as handle:
        handle.write(text)
    os.unlink(os.path.join(overlay, "lib", MISSING))  # what a stale overlay lacks
    again = fix_hip(rocm, overlay)
    assert again.changed and f"ignored its stamp {stamp}: not one this tool writes" in again.message
    assert "\n" not in again.message
    assert os.path.realpath(os.path.join(overlay, "lib", MISSING)) == check_hip(rocm).actual
    with open(stamp) as handle:
        assert json.load(handle) == {"key": key}  # written as the tool writes it
    kept = fix_hip(rocm, overlay)
    assert not kept.changed and "ignored" not in kept.message


def test_a_package_that_needs_no_fix_is_still_found_through_rocm_path(tmp_path: "os.PathLike[str]") -> None:
    good = make_fake_rocm(os.path.join(str(tmp_path), "rocm-good"), named=RUNTIME_VERSION)
    fix = fix_hip(good, os.path.join(str(tmp_path), "overlay"))
    assert not fix.check.missing and fix.cmake_prefixes == (good,) and not fix.changed
    assert "nothing to fix" in fix.message
    assert not os.path.exists(os.path.join(str(tmp_path), "overlay"))


def test_no_package_and_no_runtime_are_reported_not_fixed(tmp_path: "os.PathLike[str]") -> None:
    none = make_fake_rocm(os.path.join(str(tmp_path), "rocm-none"), with_hip_package=False)
    fix = fix_hip(none, os.path.join(str(tmp_path), "o1"))
    assert fix.cmake_prefixes == () and "no hip CMake package" in fix.message
    bare = make_fake_rocm(os.path.join(str(tmp_path), "rocm-bare"), runtime=None)
    fix = fix_hip(bare, os.path.join(str(tmp_path), "o2"))
    assert fix.check.unfixable and "no libamdhip64" in fix.message
    assert not os.path.exists(os.path.join(str(tmp_path), "o1")) and not os.path.exists(
        os.path.join(str(tmp_path), "o2"))
    assert not fix_hip(bare, os.path.join(str(tmp_path), "o3"), in_place=True).changed


@needs_cmake
def test_fix_in_place_only_when_asked(rocm: str, tmp_path: "os.PathLike[str]") -> None:
    base = str(tmp_path)
    project = make_hip_user_project(os.path.join(base, "project"))
    fix = fix_hip(rocm, os.path.join(base, "overlay"), in_place=True)
    link = os.path.join(rocm, "lib", MISSING)
    assert fix.changed and fix.cmake_prefixes == (rocm,) and link in fix.message
    assert os.readlink(link) == f"libamdhip64.so.{RUNTIME_VERSION}"  # relative, next to the real library
    assert not os.path.exists(os.path.join(base, "overlay"))
    assert configure(project, os.path.join(base, "b"), [rocm], rocm=rocm).returncode == 0
    again = fix_hip(rocm, os.path.join(base, "overlay"), in_place=True)
    assert not again.changed and "nothing to fix" in again.message


def test_fix_in_place_replaces_a_dangling_link_and_reports_what_it_cannot_write(rocm: str) -> None:
    link = os.path.join(rocm, "lib", MISSING)
    os.symlink("libamdhip64.so.gone", link)
    assert check_hip(rocm).missing == (MISSING,)
    fix = fix_hip(rocm, os.path.join(rocm, "no-overlay"), in_place=True)
    assert fix.changed and f"created {link}" in fix.message and os.path.exists(link)
    os.unlink(link)
    if os.geteuid() == 0:
        return  # root writes anywhere: the refusal cannot be shown here
    os.chmod(os.path.join(rocm, "lib"), 0o555)
    try:
        with pytest.raises(EnsureError) as info:
            fix_hip(rocm, os.path.join(rocm, "no-overlay"), in_place=True)
        assert info.value.code == ExitCode.FLYDSL_BUILD and info.value.stage == "fixes"
        assert "--fix-rocm-in-place" in info.value.hint
    finally:
        os.chmod(os.path.join(rocm, "lib"), 0o755)


def cached(build: str, name: str) -> Optional[str]:
    """The value of ``name`` in ``build``'s CMakeCache.txt, or None."""
    with open(os.path.join(build, "CMakeCache.txt")) as handle:
        for line in handle:
            if line.startswith(name + ":"):
                return line.rstrip("\n").split("=", 1)[1]
    return None


def fails_on_the_missing_library(out: "subprocess.CompletedProcess[str]", rocm: str) -> bool:
    """CMake's own import check of ROCm's hip package, failing on the library name it cannot find."""
    return (out.returncode != 0 and 'The imported target "hip::amdhip64" references the file' in out.stdout
            and os.path.join(rocm, "lib", MISSING) in out.stdout and "but this file does not exist" in out.stdout)


@needs_cmake
def test_stale_hip_dir_in_a_build_folder_is_forgotten(rocm: str, tmp_path: "os.PathLike[str]") -> None:
    """A build folder configured (and failed) before the fix caches ROCm's hip_DIR, which wins over
    CMAKE_PREFIX_PATH: without dropping it, the overlay would never be used there."""
    base = str(tmp_path)
    project = make_hip_user_project(os.path.join(base, "project"))
    build = os.path.join(base, "build-fly")
    rocm_package = os.path.join(rocm, "lib", "cmake", "hip")
    first = configure(project, build, [rocm], rocm=rocm)
    assert fails_on_the_missing_library(first, rocm), first.stdout
    assert cached(build, "hip_DIR") == rocm_package
    fix = fix_hip(rocm, os.path.join(base, "overlay"))
    package = os.path.join(fix.cmake_prefixes[0], "lib", "cmake", "hip")
    stale = configure(project, build, list(fix.cmake_prefixes), rocm=rocm)
    assert fails_on_the_missing_library(stale, rocm), stale.stdout  # the cached hip_DIR wins: ROCm's package
    assert cached(build, "hip_DIR") == rocm_package
    with open(os.path.join(build, "CMakeCache.txt")) as handle:
        before = handle.read().splitlines()
    fix_hip(rocm, os.path.join(base, "overlay"), build_dir=build)  # the fix forgets the stale hip_DIR
    with open(os.path.join(build, "CMakeCache.txt")) as handle:
        after = handle.read().splitlines()
    # Only hip_DIR changes (CMake searches again); every other entry of the build folder's cache stays.
    changed = [(old, new) for old, new in zip(before, after) if old != new]
    assert len(after) == len(before) and changed == [(f"hip_DIR:PATH={rocm_package}", "hip_DIR:PATH=hip_DIR-NOTFOUND")]
    fixed = configure(project, build, list(fix.cmake_prefixes), rocm=rocm)
    assert fixed.returncode == 0, fixed.stdout
    assert cached(build, "hip_DIR") == package
    assert not drop_stale_hip_dir(build, package)  # now it names the overlay's package
    assert not drop_stale_hip_dir(os.path.join(base, "no-such-build"), package)
