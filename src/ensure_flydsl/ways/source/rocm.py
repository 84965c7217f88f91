"""Compatibility fixes for ROCm images: small, idempotent, reported, and never written into ROCm.

The hip CMake library-name mismatch: an image's ``lib/cmake/hip/hip-targets-*.cmake`` names
``libamdhip64.so.7.2.70201`` while the runtime installed is ``libamdhip64.so.7.2.53211``; CMake's import
check then stops the FlyDSL configure.  The bash executor (ensure_flydsl.sh) symlinked the expected name
inside /opt/rocm/lib.  Here a private overlay prefix is built instead: every entry of ROCm is linked into
it, ``lib/cmake/hip`` is a byte-identical copy (hip-config.cmake derives its prefix from its own location,
possibly through REALPATH, so a link would lead back to ROCm), and the missing name points at the real
library.  The overlay goes first on CMAKE_PREFIX_PATH for the build steps only; ROCM_PATH is left
untouched.

With ``--fix-rocm-in-place`` (FLYDSL_FIX_ROCM_IN_PLACE=1) the bash executor's fix is applied instead: the
missing name is linked to the real library inside ``ROCM_PATH/lib`` itself.  Only when explicitly asked.

A real ``cmake`` configure of ``find_package(hip REQUIRED CONFIG)`` against a broken tree fails with CMake's
"The imported target "hip::amdhip64" references the file ... but this file does not exist", and succeeds
with the overlay first on CMAKE_PREFIX_PATH (tests/test_fixes.py).  A build folder whose earlier configure
found ROCm's own package keeps ``hip_DIR`` in its CMakeCache.txt, which wins over CMAKE_PREFIX_PATH:
:func:`drop_stale_hip_dir` removes that entry so the next configure searches again.

The overlay's stamp (``layout.overlay_stamp``) records what it was made for (:class:`OverlayKey`: the ROCm
install's entries and listings, the hip package's files, the missing names and the real library); it is
read back at one place (:func:`read_overlay_stamp`), field by field, and one that is not a stamp this tool
writes is treated as absent (the overlay is made again) and said in the fix's line.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import overlay_stamp
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write, atomic_write_json, read_json, remove_file, remove_tree

_HIP_LIB_REF = re.compile(r"\$\{_IMPORT_PREFIX\}/lib/(libamdhip64\.so[0-9.]*)")
# Entries of ROCm left out of the overlay.  ROCm's own LLVM (``llvm/lib/cmake/llvm``) would otherwise be a
# candidate for MLIR's find_package(LLVM ... EXACT), which searches CMAKE_PREFIX_PATH before its HINTS; the
# hip package reaches it through ROCM_PATH (set for the build), not through its own prefix.
OVERLAY_SKIPPED = ("llvm",)


@dataclass(frozen=True)
class HipCheck:
    """What the hip CMake package under a ROCm prefix says, and what the file system has."""

    package_dir: Optional[str]  # <rocm>/lib/cmake/hip when present
    referenced: Tuple[str, ...]  # library file names the package's targets files name
    missing: Tuple[str, ...]  # of those, the ones not in <rocm>/lib
    actual: Optional[str]  # the real libamdhip64 in <rocm>/lib, when there is one

    @property
    def needs_fix(self) -> bool:
        return bool(self.missing) and self.actual is not None

    @property
    def unfixable(self) -> bool:
        return bool(self.missing) and self.actual is None


def check_hip(rocm_path: str) -> HipCheck:
    package_dir = os.path.join(rocm_path, "lib", "cmake", "hip")
    if not os.path.isdir(package_dir):
        return HipCheck(None, (), (), None)
    referenced: List[str] = []
    for path in sorted(glob.glob(os.path.join(package_dir, "*.cmake"))):
        try:
            with open(path, errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        for name in _HIP_LIB_REF.findall(text):
            if name not in referenced:
                referenced.append(name)
    lib = os.path.join(rocm_path, "lib")
    missing = tuple(n for n in referenced if not os.path.exists(os.path.join(lib, n)))
    return HipCheck(package_dir, tuple(referenced), missing, _actual_library(lib))


def _actual_library(lib: str) -> Optional[str]:
    """The real (non-link) libamdhip64.so.* in ``lib``, preferring the longest version string."""
    candidates = [
        p for p in glob.glob(os.path.join(lib, "libamdhip64.so*")) if os.path.isfile(p) and not os.path.islink(p)
    ]
    if not candidates:
        candidates = [p for p in glob.glob(os.path.join(lib, "libamdhip64.so*")) if os.path.isfile(p)]
    return max(candidates, key=len) if candidates else None


def _listing_digest(folder: str) -> str:
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    return hashlib.sha256("\0".join(names).encode(errors="replace")).hexdigest()


@dataclass(frozen=True)
class OverlayKey:
    """What an overlay was made for: the ROCm prefix, its entries, digests of the names in its lib/ and
    lib/cmake/, the hip package's files (name, size, whole-second mtime), the missing names, the real library."""

    rocm_path: str
    entries: Tuple[str, ...]
    lib: str
    cmake: str
    package: Tuple[Tuple[str, int, int], ...]
    missing: Tuple[str, ...]
    actual: Optional[str]

    def to_json(self) -> Dict[str, object]:
        return {"rocm_path": self.rocm_path, "entries": list(self.entries), "lib": self.lib, "cmake": self.cmake,
                "package": [list(entry) for entry in self.package], "missing": list(self.missing),
                "actual": self.actual}

    @classmethod
    def from_json(cls, data: object) -> Optional["OverlayKey"]:
        """The key, or None when a value is not one :func:`_overlay_key` makes: an absolute ROCm prefix and
        real library, names without a slash, sha256 digests, sizes and times that are whole numbers >= 0."""
        if not isinstance(data, dict):
            return None
        rocm_path, actual = fields.absolute_path(data.get("rocm_path")), data.get("actual")
        entries, missing, package = _names(data.get("entries")), _names(data.get("missing")), data.get("package")
        lib, cmake = data.get("lib"), data.get("cmake")
        if rocm_path is None or entries is None or missing is None or not isinstance(package, list):
            return None
        if not all(isinstance(d, str) and len(d) == 64 and set(d) <= _HEX for d in (lib, cmake)):
            return None
        if actual is not None and fields.absolute_path(actual) is None:
            return None
        files = [_package_file(entry) for entry in package]
        if any(f is None for f in files):
            return None
        return cls(rocm_path, entries, str(lib), str(cmake), tuple(f for f in files if f is not None), missing,
                   actual)


_HEX = frozenset("0123456789abcdef")


def _names(value: object) -> Optional[Tuple[str, ...]]:
    """File names of one folder (no slash, no NUL, not empty)."""
    found = fields.paths(value)
    return tuple(found) if found is not None and all(n and "/" not in n for n in found) else None


def _package_file(value: object) -> Optional[Tuple[str, int, int]]:
    if not isinstance(value, list) or len(value) != 3:
        return None
    names, size, mtime = _names(value[:1]), fields.integer(value[1]), fields.integer(value[2])
    if names is None or size is None or mtime is None or size < 0 or mtime < 0:
        return None
    return names[0], size, mtime


def read_overlay_stamp(path: str) -> Tuple[Optional[OverlayKey], str]:
    """The key the overlay's stamp at ``path`` records (None when there is none), and, when the file there is
    not a stamp this tool writes, the clause that says it was ignored ("" otherwise)."""
    if not os.path.lexists(path):
        return None, ""
    data = read_json(path)
    key = OverlayKey.from_json(data.get("key")) if data is not None else None
    if key is None:
        return None, f"ignored its stamp {path}: not one this tool writes"
    return key, ""


def _overlay_key(rocm_path: str, check: HipCheck) -> OverlayKey:
    listing = sorted(os.listdir(rocm_path)) if os.path.isdir(rocm_path) else []
    package_files = []
    if check.package_dir:
        for name in sorted(os.listdir(check.package_dir)):
            st = os.stat(os.path.join(check.package_dir, name))
            package_files.append((name, st.st_size, int(st.st_mtime)))
    return OverlayKey(
        rocm_path=rocm_path,
        entries=tuple(listing),
        lib=_listing_digest(os.path.join(rocm_path, "lib")),
        cmake=_listing_digest(os.path.join(rocm_path, "lib", "cmake")),
        package=tuple(package_files),
        missing=tuple(check.missing),
        actual=check.actual,
    )


def provide_hip_overlay(rocm_path: str, overlay: str, check: HipCheck) -> Tuple[bool, str]:
    """Build (or keep) the private overlay prefix for ``rocm_path``; return whether anything changed, and the
    clause saying its stamp was ignored ("" when it was not)."""
    key = _overlay_key(rocm_path, check)
    stamp = overlay_stamp(overlay)
    recorded, ignored = read_overlay_stamp(stamp)
    if recorded == key and os.path.isdir(overlay):
        return False, ""
    # The overlay is ours alone (it lives in the tool's private folder), so it is rebuilt from scratch; its
    # stamp goes first, so that an interrupted rebuild is never taken for a finished one.
    remove_file(stamp)
    remove_tree(overlay)
    os.makedirs(os.path.join(overlay, "lib", "cmake"))
    for entry in os.listdir(rocm_path):
        if entry != "lib" and entry not in OVERLAY_SKIPPED:
            os.symlink(os.path.join(rocm_path, entry), os.path.join(overlay, entry))
    real_lib = os.path.join(rocm_path, "lib")
    for entry in os.listdir(real_lib):
        if entry != "cmake":
            os.symlink(os.path.join(real_lib, entry), os.path.join(overlay, "lib", entry))
    real_cmake = os.path.join(real_lib, "cmake")
    for entry in os.listdir(real_cmake):
        if entry != "hip":
            os.symlink(os.path.join(real_cmake, entry), os.path.join(overlay, "lib", "cmake", entry))
    assert check.package_dir is not None and check.actual is not None
    # A copy, links inside it followed: hip-config.cmake takes its prefix from the REALPATH of a linked file.
    shutil.copytree(check.package_dir, os.path.join(overlay, "lib", "cmake", "hip"), symlinks=False,
                    ignore_dangling_symlinks=True)
    for name in check.missing:
        os.symlink(check.actual, os.path.join(overlay, "lib", name))
    atomic_write_json(stamp, {"key": key.to_json()})
    return True, ignored


def fix_hip_in_place(rocm_path: str, check: HipCheck) -> List[str]:
    """The bash executor's fix, only with --fix-rocm-in-place: link each missing name to the real library inside
    ``<rocm>/lib``.  Idempotent; returns the links it created (none when all are there)."""
    if not check.needs_fix:
        return []
    assert check.actual is not None
    lib = os.path.join(rocm_path, "lib")
    created: List[str] = []
    for name in check.missing:
        link = os.path.join(lib, name)
        if os.path.exists(link):
            continue
        try:
            if os.path.islink(link):
                os.unlink(link)  # a dangling link: it points nowhere, nothing is lost
            os.symlink(os.path.relpath(check.actual, lib), link)
        except OSError as exc:
            raise EnsureError(
                ExitCode.FLYDSL_BUILD,
                f"cannot create {link} (-> {os.path.basename(check.actual)}) for --fix-rocm-in-place: {exc.strerror}",
                stage=Stage.FIXES,
                hint="run as a user who may write ROCM_PATH, or leave --fix-rocm-in-place off to use a private "
                "corrected copy of the hip CMake package instead",
            ) from None
        created.append(link)
    return created


@dataclass(frozen=True)
class HipFix:
    """What was done about the hip CMake package, and the prefixes to put first on CMAKE_PREFIX_PATH."""

    check: HipCheck
    cmake_prefixes: Tuple[str, ...]
    changed: bool  # this call created or rebuilt something
    message: str  # one line for the report


def fix_hip(rocm_path: str, overlay: str, *, in_place: bool = False) -> HipFix:
    """Check the hip package under ``rocm_path`` and fix a library-name mismatch: a private overlay at
    ``overlay`` (ROCm untouched), or links inside ROCm when ``in_place``.  A package that needs no fix
    still has ``rocm_path`` as its prefix, so CMake finds it when ROCM_PATH is not /opt/rocm."""
    check = check_hip(rocm_path)
    names = ", ".join(check.missing)
    if check.needs_fix and in_place:
        created = fix_hip_in_place(rocm_path, check)
        done = f"created {', '.join(created)}" if created else "the links are already there"
        return HipFix(check, (rocm_path,), bool(created), (
            f"the hip CMake package in {rocm_path} names {names}, which is missing; --fix-rocm-in-place: {done} "
            f"(pointing at {os.path.basename(str(check.actual))})"))
    if check.needs_fix:
        changed, ignored = provide_hip_overlay(rocm_path, overlay, check)
        return HipFix(check, (overlay,), changed, (
            f"the hip CMake package in {rocm_path} names {names}, which is missing; "
            f"{'provided' if changed else 'using'} a private corrected copy at {overlay} "
            f"(pointing at {os.path.basename(str(check.actual))}{'; ' + ignored if ignored else ''}); "
            f"{rocm_path} is left untouched"))
    if check.unfixable:
        return HipFix(check, (rocm_path,), False, (
            f"warning: the hip CMake package in {rocm_path} names {names} and there is no libamdhip64 in "
            f"{rocm_path}/lib to point it at; a build that needs HIP will fail to configure"))
    if check.package_dir:
        return HipFix(check, (rocm_path,), False,
                      f"the hip CMake package in {rocm_path} names libraries that exist; nothing to fix")
    return HipFix(check, (), False, f"there is no hip CMake package in {rocm_path}/lib/cmake/hip")


_HIP_DIR_ENTRY = re.compile(r"^(hip_DIR:[A-Z]+=)(.*)$", re.MULTILINE)


def drop_stale_hip_dir(build_dir: str, package_dir: str) -> bool:
    """Forget ``hip_DIR`` in ``build_dir``'s CMakeCache.txt when it names another package folder than
    ``package_dir`` (the overlay's lib/cmake/hip): a cached hip_DIR wins over CMAKE_PREFIX_PATH, so a build
    folder configured before the fix would keep failing.  The entry becomes ``hip_DIR-NOTFOUND`` (CMake
    searches again; removing the line would break the cache's comment/entry pairs).  Return whether it
    was changed."""
    cache = os.path.join(build_dir, "CMakeCache.txt")
    try:
        with open(cache, errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    found = _HIP_DIR_ENTRY.search(text)
    if found is None:
        return False
    value = found.group(2).strip()
    if value.endswith("-NOTFOUND") or os.path.normpath(value) == os.path.normpath(package_dir):
        return False
    atomic_write(cache, _HIP_DIR_ENTRY.sub(lambda m: m.group(1) + "hip_DIR-NOTFOUND", text, count=1).encode())
    return True
