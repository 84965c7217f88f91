"""Compatibility fixes for ROCm images: small, idempotent, reported, and never written into ROCm.

The hip CMake library-name mismatch: an image's ``lib/cmake/hip/hip-targets-*.cmake`` names
``libamdhip64.so.7.2.70201`` while the runtime installed is ``libamdhip64.so.7.2.53211``; CMake's import
check then stops the FlyDSL configure.  The seed symlinked the expected name inside /opt/rocm/lib.  Here a
private overlay prefix is built instead: every entry of ROCm is linked into it, ``lib/cmake/hip`` is a
byte-identical copy (hip-config.cmake derives its prefix from its own location, possibly through
REALPATH, so a link would lead back to ROCm), and the missing name points at the real library.  The
overlay goes first on CMAKE_PREFIX_PATH for the build steps only; ROCM_PATH is left untouched.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import shutil
from typing import Dict, List, Optional, Tuple

from .state import remove_tree
from .util import atomic_write_json, read_json

_HIP_LIB_REF = re.compile(r"\$\{_IMPORT_PREFIX\}/lib/(libamdhip64\.so[0-9.]*)")


@dataclasses.dataclass(frozen=True)
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


def _overlay_key(rocm_path: str, check: HipCheck) -> Dict[str, object]:
    listing = sorted(os.listdir(rocm_path)) if os.path.isdir(rocm_path) else []
    package_files = []
    if check.package_dir:
        for name in sorted(os.listdir(check.package_dir)):
            st = os.stat(os.path.join(check.package_dir, name))
            package_files.append([name, st.st_size, int(st.st_mtime)])
    return {
        "rocm_path": rocm_path,
        "entries": listing,
        "package": package_files,
        "missing": list(check.missing),
        "actual": check.actual,
    }


def provide_hip_overlay(rocm_path: str, overlay: str, check: HipCheck) -> bool:
    """Build (or keep) the private overlay prefix for ``rocm_path``; return whether anything changed."""
    key = _overlay_key(rocm_path, check)
    stamp = os.path.join(overlay + ".json")
    recorded = read_json(stamp)
    if recorded is not None and recorded.get("key") == key and os.path.isdir(overlay):
        return False
    # The overlay is ours alone (it lives in the tool's private folder), so it is rebuilt from scratch.
    remove_tree(overlay)
    os.makedirs(os.path.join(overlay, "lib", "cmake"))
    for entry in os.listdir(rocm_path):
        if entry != "lib":
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
    shutil.copytree(check.package_dir, os.path.join(overlay, "lib", "cmake", "hip"))
    for name in check.missing:
        os.symlink(check.actual, os.path.join(overlay, "lib", name))
    atomic_write_json(stamp, {"key": key})
    return True
