"""A source build's environment: shims first on PATH, pip held to a private folder, the jobs, the LLVM record;
ROCm, and its hip CMake package fixed by a private overlay (or by links in it, when asked)."""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import llvm_record, mlir_install, overlay_stamp, pip_constraints, tools_dir
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import with_git_config
from ensure_flydsl.source.needs import LlvmInputs
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write, atomic_write_json, read_json, remove_file, remove_tree
from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.ways.package_index import pip_env

MEMORY_PER_JOB_BYTES = 4 * 1024**3  # a job of the LLVM/MLIR build (its big static links) may take this much


def default_jobs(cores: int, available_memory: Optional[int]) -> int:
    """Cores, capped so that every job has MEMORY_PER_JOB_BYTES: the default never OOMs a small machine."""
    jobs = max(1, cores)
    if available_memory is not None:
        jobs = min(jobs, max(1, available_memory // MEMORY_PER_JOB_BYTES))
    return jobs


def available_memory() -> Optional[int]:
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/meminfo") as handle:
        return next((int(line.split()[1]) * 1024 for line in handle if line.startswith("MemAvailable:")), None)
    return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def prepare_toolchain(root: str, interpreter: Interpreter, constraints: Sequence[str]) -> None:
    """The python and pip shims of the build steps (in ``tools/bin``); every ``pip install`` is held to
    ``constraints`` and goes to the private ``tools/pylib``."""
    tools = tools_dir(root)
    bin_dir, pylib = os.path.join(tools, "bin"), os.path.join(tools, "pylib")
    for folder in (bin_dir, pylib):
        os.makedirs(folder, exist_ok=True)
    py = shlex.quote(interpreter.executable)
    python_shim = f'#!/bin/sh\nexec {py} "$@"\n'
    pip_shim = (
        "#!/bin/sh\n"
        "# FlyDSL's build_llvm.sh runs an unguarded `pip install ...`: keep it out of the interpreter's\n"
        "# site-packages by installing into ensure-flydsl's private folder (on PYTHONPATH for the build).\n"
        'if [ "$1" = install ]; then\n'
        "  shift\n"
        f"  exec {py} -m pip install --disable-pip-version-check --no-warn-script-location --upgrade "
        f'--target {shlex.quote(pylib)} "$@"\n'
        "fi\n"
        f'exec {py} -m pip "$@"\n'
    )
    for name, text in (("python3", python_shim), ("python", python_shim), ("pip", pip_shim), ("pip3", pip_shim)):
        atomic_write(os.path.join(bin_dir, name), text.encode(), mode=0o755)
    atomic_write(pip_constraints(tools), "".join(f"{line}\n" for line in constraints).encode())


def build_environment(base: Mapping[str, str], root: str, python: str, *, cmake_prefixes: Sequence[str],
                      rocm_path: str, mlir_path: Optional[str], jobs: int, git_mirrors: GitMirrors) -> Dict[str, str]:
    """The caller's environment for a build step (the shims of :func:`prepare_toolchain` first), its scripts' git
    fetching through the mirrors too; ``cmake_prefixes`` (the hip overlay) are searched first."""
    tools = tools_dir(root)
    pylib = os.path.join(tools, "pylib")
    env = pip_env(with_git_config(base, git_mirrors))
    env["PATH"] = os.pathsep.join([os.path.join(tools, "bin"), base.get("PATH", os.defpath)])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pylib, base.get("PYTHONPATH", "")) if p)
    # pip installs into the private pylib (replacing what an earlier run put there), held to the constraints
    # file: a file: URL, since pip splits a plain path at its spaces.
    env.update({"PIP_TARGET": pylib, "PIP_UPGRADE": "1", "PIP_NO_WARN_SCRIPT_LOCATION": "1",
                "PIP_CONSTRAINT": pathlib.Path(os.path.abspath(pip_constraints(tools))).as_uri()})
    prefixes = [*cmake_prefixes, *([base["CMAKE_PREFIX_PATH"]] if base.get("CMAKE_PREFIX_PATH") else [])]
    if prefixes:
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join(prefixes)
    env.update({"ROCM_PATH": rocm_path, "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs), "PYTHON_EXECUTABLE": python})
    env.pop("MLIR_PATH", None)
    if mlir_path:
        env["MLIR_PATH"] = mlir_path
    return env


def is_mlir_install(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "lib", "cmake", "mlir"))


@dataclass(frozen=True)
class LlvmRecord(fields.Record):
    """``BASE/.llvm-project.ensure-flydsl.json``: ``llvm-project/`` is ours; the keys of its started and done builds."""

    created: bool = fields.checked(fields.boolean)
    started: Optional[Dict[str, object]] = fields.checked(fields.mapping, None)
    done: Optional[Dict[str, object]] = fields.checked(fields.mapping, None)

    @classmethod
    def read(cls, base_dir: str) -> Optional["LlvmRecord"]:
        return cls.from_json(read_json(llvm_record(base_dir)))

    def write(self, base_dir: str) -> None:
        atomic_write_json(llvm_record(base_dir), asdict(self))


def built_mlir(base_dir: str, inputs: Optional[LlvmInputs], interpreter: Optional[Interpreter]) -> Optional[str]:
    """The MLIR install of the build of ``inputs`` for ``interpreter`` (None: either unknown) this tool finished in
    ``BASE/llvm-project``, if there (one with every target serves as well as the minimal one a run makes now)."""
    if inputs is None or interpreter is None:
        return None
    record, install, key = LlvmRecord.read(base_dir), mlir_install(base_dir), inputs.key(interpreter.abi)
    ok = key is not None and record is not None and is_mlir_install(install) \
        and record.done in (key, inputs.key(interpreter.abi, minimal=False))
    return install if ok else None


_HIP_LIB_REF = re.compile(r"\$\{_IMPORT_PREFIX\}/lib/(libamdhip64\.so[0-9.]*)")
# ROCm's own LLVM stays out of the overlay: MLIR's find_package(LLVM ... EXACT) searches CMAKE_PREFIX_PATH before
# its HINTS and would take it; the hip package reaches it through ROCM_PATH.
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
        with contextlib.suppress(OSError), open(path, errors="replace") as handle:
            referenced += _HIP_LIB_REF.findall(handle.read())
    referenced = list(dict.fromkeys(referenced))
    lib = os.path.join(rocm_path, "lib")
    missing = tuple(n for n in referenced if not os.path.exists(os.path.join(lib, n)))
    # The real library: a file that is no link, the longest version string first.
    found = [p for p in glob.glob(os.path.join(lib, "libamdhip64.so*")) if os.path.isfile(p)]
    candidates = [p for p in found if not os.path.islink(p)] or found
    return HipCheck(package_dir, tuple(referenced), missing, max(candidates, key=len) if candidates else None)


def _listing_digest(folder: str) -> str:
    return hashlib.sha256("\0".join(sorted(os.listdir(folder))).encode(errors="replace")).hexdigest()


def _names(value: object) -> Optional[Tuple[str, ...]]:
    """File names of one folder (no slash, no NUL, not empty)."""
    found = fields.paths(value)
    return tuple(found) if found is not None and all(n and "/" not in n for n in found) else None


def _package(value: object) -> Optional[Tuple[Tuple[str, int, int], ...]]:
    """The hip package's files: [name, size, mtime] each."""
    if not isinstance(value, list) or not all(isinstance(f, list) and len(f) == 3 for f in value):
        return None
    found = [(names[0], size, mtime) for f in value if (names := _names(f[:1]))
             and (size := fields.byte_count(f[1])) is not None and (mtime := fields.byte_count(f[2])) is not None]
    return tuple(found) if len(found) == len(value) else None


@dataclass(frozen=True)
class OverlayKey(fields.Record):
    """What an overlay was made for: its stamp."""

    rocm_path: str = fields.checked(fields.absolute_path)
    entries: Tuple[str, ...] = fields.checked(_names)
    lib: str = fields.checked(fields.object_name)
    cmake: str = fields.checked(fields.object_name)
    package: Tuple[Tuple[str, int, int], ...] = fields.checked(_package)
    missing: Tuple[str, ...] = fields.checked(_names)
    actual: Optional[str] = fields.checked(fields.absolute_path, nullable=True)


def provide_hip_overlay(rocm_path: str, overlay: str, check: HipCheck) -> Tuple[bool, str]:
    """Build (or keep) the private overlay for ``rocm_path``: whether anything changed, and the ignored clause."""
    package = check.package_dir
    assert package is not None and check.actual is not None  # a package that needs the fix
    files = [(name, os.stat(os.path.join(package, name))) for name in sorted(os.listdir(package))]
    key = OverlayKey(rocm_path=rocm_path, entries=tuple(sorted(os.listdir(rocm_path))),
                     lib=_listing_digest(os.path.join(rocm_path, "lib")),
                     cmake=_listing_digest(os.path.join(rocm_path, "lib", "cmake")),
                     package=tuple((name, st.st_size, int(st.st_mtime)) for name, st in files),
                     missing=check.missing, actual=check.actual)
    stamp = overlay_stamp(overlay)
    data = read_json(stamp)
    recorded = OverlayKey.from_json(data.get("key")) if data is not None else None
    if recorded == key and os.path.isdir(overlay):
        return False, ""
    planted = recorded is None and os.path.lexists(stamp)
    ignored = f"ignored its stamp {stamp}: not one this tool writes" if planted else ""
    # The stamp goes first: an interrupted rebuild is never taken for a finished one.
    remove_file(stamp)
    remove_tree(overlay)
    os.makedirs(os.path.join(overlay, "lib", "cmake"))
    for folder, skipped in (("", ("lib", *OVERLAY_SKIPPED)), ("lib", ("cmake",)), ("lib/cmake", ("hip",))):
        for entry in os.listdir(os.path.join(rocm_path, folder)):
            if entry not in skipped:
                os.symlink(os.path.join(rocm_path, folder, entry), os.path.join(overlay, folder, entry))
    # A copy, links inside it followed: hip-config.cmake takes its prefix from the REALPATH of a linked file.
    shutil.copytree(package, os.path.join(overlay, "lib", "cmake", "hip"), symlinks=False,
                    ignore_dangling_symlinks=True)
    for name in check.missing:
        os.symlink(check.actual, os.path.join(overlay, "lib", name))
    atomic_write_json(stamp, {"key": asdict(key)})
    return True, ignored


@dataclass(frozen=True)
class HipFix:
    """What was done about the hip CMake package, and the prefixes to put first on CMAKE_PREFIX_PATH."""

    check: HipCheck
    cmake_prefixes: Tuple[str, ...]
    changed: bool  # this call created or rebuilt something
    message: str  # one line for the report


def fix_hip(rocm_path: str, overlay: str, *, in_place: bool = False, build_dir: Optional[str] = None) -> HipFix:
    """Fix a library-name mismatch of the hip package under ``rocm_path``: an overlay, or links in ROCm when
    ``in_place``; a package needing no fix keeps ``rocm_path`` as its prefix (ROCM_PATH may not be /opt/rocm)."""
    check = check_hip(rocm_path)
    missing = f"the hip CMake package in {rocm_path} names {', '.join(check.missing)}"
    actual = os.path.basename(str(check.actual))
    if check.needs_fix and in_place:
        lib, created = os.path.join(rocm_path, "lib"), []
        for link in (os.path.join(lib, name) for name in check.missing):
            if os.path.exists(link):
                continue
            try:
                if os.path.islink(link):
                    os.unlink(link)  # a dangling link: it points nowhere, nothing is lost
                os.symlink(os.path.relpath(str(check.actual), lib), link)
            except OSError as exc:
                raise EnsureError(ExitCode.FLYDSL_BUILD, f"cannot create {link} (-> {actual}) for "
                                  f"--fix-rocm-in-place: {exc.strerror}", stage=Stage.FIXES,
                                  hint="run as a user who may write ROCM_PATH, or leave --fix-rocm-in-place off to use "
                                  "a private corrected copy of the hip CMake package instead") from None
            created.append(link)
        done = f"created {', '.join(created)}" if created else "the links are already there"
        return HipFix(check, (rocm_path,), bool(created),
                      f"{missing}, which is missing; --fix-rocm-in-place: {done} (pointing at {actual})")
    if check.needs_fix:
        changed, ignored = provide_hip_overlay(rocm_path, overlay, check)
        if build_dir is not None:
            drop_stale_hip_dir(build_dir, os.path.join(overlay, "lib", "cmake", "hip"))
        return HipFix(check, (overlay,), changed, (
            f"{missing}, which is missing; {'provided' if changed else 'using'} a private corrected copy at {overlay} "
            f"(pointing at {actual}{'; ' + ignored if ignored else ''}); {rocm_path} is left untouched"))
    if check.unfixable:
        return HipFix(check, (rocm_path,), False, (
            f"warning: {missing} and there is no libamdhip64 in {rocm_path}/lib to point it at; a build that needs "
            "HIP will fail to configure"))
    if check.package_dir:
        return HipFix(check, (rocm_path,), False,
                      f"the hip CMake package in {rocm_path} names libraries that exist; nothing to fix")
    return HipFix(check, (), False, f"there is no hip CMake package in {rocm_path}/lib/cmake/hip")


_HIP_DIR_ENTRY = re.compile(r"^(hip_DIR:[A-Z]+=)(.*)$", re.MULTILINE)


def drop_stale_hip_dir(build_dir: str, package_dir: str) -> bool:
    """Set a cached ``hip_DIR`` naming another folder than ``package_dir`` to ``hip_DIR-NOTFOUND`` (it wins over
    CMAKE_PREFIX_PATH: a folder configured before the fix kept failing); whether it was changed."""
    cache = os.path.join(build_dir, "CMakeCache.txt")
    try:
        with open(cache, errors="replace") as handle:
            text = handle.read()
    except OSError:
        return False
    found = _HIP_DIR_ENTRY.search(text)
    value = found.group(2).strip() if found else "-NOTFOUND"
    if value.endswith("-NOTFOUND") or os.path.normpath(value) == os.path.normpath(package_dir):
        return False
    atomic_write(cache, _HIP_DIR_ENTRY.sub(lambda m: m.group(1) + "hip_DIR-NOTFOUND", text, count=1).encode())
    return True


ROCM_SDK = "rocm-sdk"
ROCM_SDK_TIMEOUT = 30.0  # it imports its Python package; a cold start on a busy machine takes seconds


@dataclass(frozen=True)
class RocmChoice:
    """The ROCm prefix a build uses; ``rocm_sdk``: the command that printed it (None: the configured one)."""

    path: str
    configured: str  # ROCM_PATH as configured (or its default)
    rocm_sdk: Optional[str] = None
    tried: str = ""  # what asking rocm-sdk said, when it was asked and gave nothing usable

    def said(self, label: str) -> str:
        """One line for a message: which ROCm and why."""
        if self.rocm_sdk is None:
            return f"{label}={self.path}"
        return (f"{self.path} (ROCm from the package index: `{self.rocm_sdk} path --root`; {label}={self.configured} "
                "has no hip CMake package)")


def rocm_sdk_root(exe: str, environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """The prefix ``exe path --root`` prints, or (None, what went wrong)."""
    try:
        proc = run_captured([exe, "path", "--root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=environ, timeout=ROCM_SDK_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, f"`{exe} path --root` did not answer within {ROCM_SDK_TIMEOUT:.0f} s"
    except OSError as exc:
        return None, f"`{exe} path --root` does not run: {exc.strerror}"
    lines = [line.strip() for line in proc.stdout.decode(errors="replace").splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        return None, f"`{exe} path --root` exited with {proc.returncode}" + (f": {err[-1]}" if err else "")
    root = lines[-1]
    if not os.path.isabs(root) or not os.path.isdir(root):
        return None, f"`{exe} path --root` printed {root!r}, which is not a folder"
    return root, ""


def choose_rocm(configured: str, python: Optional[str], environ: Mapping[str, str]) -> RocmChoice:
    """The configured ROCm when it has a hip CMake package, else ``rocm-sdk``'s (TheRock's wheels) when that has
    one, else the configured one with what asking rocm-sdk said."""
    if check_hip(configured).package_dir is not None:
        return RocmChoice(configured, configured)
    said: List[str] = []
    # rocm-sdk beside the target interpreter (its venv's bin), then on PATH
    beside = shutil.which(ROCM_SDK, path=os.path.dirname(python)) if python else None
    for exe in dict.fromkeys(e for e in (beside, shutil.which(ROCM_SDK, path=environ.get("PATH"))) if e):
        root, problem = rocm_sdk_root(exe, environ)
        if root is None:
            said.append(problem)
        elif check_hip(root).package_dir is None:
            said.append(f"`{exe} path --root` is {root}, which has no hip CMake package either")
        else:
            return RocmChoice(root, configured, exe)
    return RocmChoice(configured, configured, tried="; ".join(said) or f"no {ROCM_SDK} command (ROCm from the "
                      "package index) beside the interpreter or on PATH")
