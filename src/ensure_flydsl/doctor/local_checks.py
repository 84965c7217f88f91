"""The doctor's checks, one function each: what the run will need, and whether this machine has it.

Each returns a :class:`Check` (ok / missing / wrong / skipped, the detail, the remedy, whether it blocks
the configured strategy, the step that would fail, whether the tool provides it itself).  The decisions
on figures (memory against jobs, free disk) are pure functions; the rest look at the machine with short
timeouts.  :mod:`ensure_flydsl.doctor.diagnose` runs them concurrently and gives the verdict.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.doctor.verdict import MISSING, WRONG, Check, passed, skipped
from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.layout import mlir_install, tools_dir
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.runs.answer import roots_sharing_marker, sharing_advice
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.needs import BuildNeeds, tool_requirements
from ensure_flydsl.source.root import classify_root, creatable_problem
from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.toolchain.environment import (
    MEMORY_PER_JOB_BYTES,
    available_memory,
    cpu_count,
    default_jobs,
    finished_llvm_build,
    is_mlir_install,
)
from ensure_flydsl.toolchain.rocm import check_hip
from ensure_flydsl.toolchain.rocm_sdk import choose_rocm
from ensure_flydsl.toolchain.tool_versions import newest, package_spec
from ensure_flydsl.toolchain.tools import machine_state
from ensure_flydsl.wheels.package_index import IndexAnswer, query_versions

GIB = 1024**3
LLVM_DISK_BYTES = 40 * GIB  # LLVM/MLIR source, build folder and install (mlir, clang, lld; three targets)
BUILD_DISK_BYTES = 5 * GIB  # FlyDSL's own build against a ready MLIR
SOURCE_DISK_BYTES = GIB // 2  # a checkout and the tool's files
_CXX17_PROBE = "#include <optional>\n#include <string_view>\nint main() { std::optional<std::string_view> v; }\n"


# ---------------------------------------------------------------------------------------------------------
# Pure decisions (unit-tested with simulated figures)
# ---------------------------------------------------------------------------------------------------------


def memory_check(jobs_setting: Optional[int], cores: int, available: Optional[int], *, heavy: bool,
                 compiles: bool, label: str = "FLYDSL_JOBS") -> Check:
    """Build parallelism against available memory (MEMORY_PER_JOB_BYTES a job: LLVM's big links).  Too many
    jobs is a warning with the number that fits; blocking only when not even one job fits an LLVM build."""
    stage = Stage.LLVM if heavy else Stage.BUILD
    if not compiles:
        return skipped("memory", "nothing is compiled", stage)
    if available is None:
        return skipped("memory", "available memory is unknown (no /proc/meminfo)", stage)
    jobs = jobs_setting if jobs_setting is not None else default_jobs(cores, available)
    per_job = MEMORY_PER_JOB_BYTES // GIB
    have = f"{available / GIB:.1f} GiB available"
    source = f"{label}={jobs}" if jobs_setting is not None else f"{jobs} jobs by default ({cores} cores)"
    if jobs * MEMORY_PER_JOB_BYTES <= available:
        return passed("memory", f"{source} x {per_job} GiB a job fits {have}", stage)
    fits = available // MEMORY_PER_JOB_BYTES
    if fits >= 1:
        return Check(name="memory", status=WRONG,
                     detail=f"{source} x {per_job} GiB a job is more than {have}: big link steps may run "
                     "out of memory (killed, exit 137)", remedy=f"set {label}={fits} (or leave it unset: the default "
                     "caps jobs by memory)", blocking=False, stage=stage)
    return Check(name="memory", status=WRONG, detail=f"{have}: not even one {per_job} GiB job fits; "
                 + ("LLVM's links will likely be killed" if heavy else "the build may run out of memory"),
                 remedy="free memory or use a bigger machine" + ("; or set MLIR_PATH to a ready MLIR install to skip "
                 "the LLVM build" if heavy else ""), blocking=heavy, stage=stage)


def disk_check(free: Optional[int], need: int, where: str, *, heavy: bool) -> Check:
    stage = Stage.LLVM if heavy else Stage.BUILD
    if free is None:
        return skipped("disk", f"cannot tell the free space at {where}", stage)
    what = "an LLVM/MLIR build and FlyDSL's" if heavy else "the build"
    detail = f"{free / GIB:.1f} GiB free at {where}; {what} needs about {need / GIB:.{0 if need >= GIB else 1}f} GiB"
    if free >= need:
        return passed("disk", detail, stage)
    remedy = "free space there, or set FLYDSL_ROOT to a folder on a bigger file system"
    if heavy:
        remedy += ", or set MLIR_PATH to a ready MLIR install (then about 5 GiB is enough)"
    return Check(name="disk", status=MISSING, detail=detail, remedy=remedy, blocking=True, stage=stage)


# ---------------------------------------------------------------------------------------------------------
# What the checks share, and the checks
# ---------------------------------------------------------------------------------------------------------


class Index:
    """Package index answers, each asked once (concurrent askers wait for the first)."""

    def __init__(self, python: str, environ: Mapping[str, str], timeout: float) -> None:
        self.python = python
        self.environ = environ
        self.timeout = timeout
        self._lock = threading.Lock()
        self._answers: Dict[Tuple[str, Tuple[str, ...], str], "concurrent.futures.Future[IndexAnswer]"] = {}

    def answer(self, package: str, options: Sequence[str] = (), python: Optional[str] = None) -> IndexAnswer:
        """What the index has for ``package``, asked through ``python``'s pip (default: the installer's)."""
        python = python or self.python
        key = (package, tuple(options), python)
        with self._lock:
            future = self._answers.get(key)
            owner = future is None
            if future is None:
                future = self._answers[key] = concurrent.futures.Future()
        if owner:
            try:
                future.set_result(query_versions(python, package, self.environ, timeout=self.timeout,
                                                 options=options))
            except BaseException as exc:  # never leave the other askers waiting
                future.set_exception(exc)
        return future.result()

    def asked(self) -> List[IndexAnswer]:
        with self._lock:
            futures = list(self._answers.values())
        return [f.result() for f in futures]


@dataclasses.dataclass
class RunContext:
    settings: Settings
    environ: Mapping[str, str]
    timeout: float
    interpreter: Optional[Interpreter]
    needs: BuildNeeds
    llvm: bool  # the LLVM/MLIR step will run
    index: Index

    @property
    def heavy(self) -> bool:
        return self.llvm and (self.needs.llvm_cmake or self.needs.llvm_remote is not None)

    @property
    def compiles(self) -> bool:
        return self.needs.cmake or self.heavy

    def tool_stage(self) -> Stage:
        return Stage.LLVM if self.heavy else Stage.BUILD


def check_interpreter(settings: Settings, environ: Mapping[str, str]) -> Tuple[Check, Optional[Interpreter]]:
    label = settings.label("python")
    try:
        interp = describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                      timeout_label=settings.label("probe_timeout"))
    except EnsureError as exc:
        return Check(name="interpreter", status=WRONG, detail=f"{label}={settings.python}: {exc.reason}",
                     remedy=f"set {label} to the Python interpreter that will import FlyDSL", blocking=True,
                     stage=Stage.SETTINGS), None
    return passed("interpreter", f"{interp.executable} {interp.version} ({interp.abi})", Stage.SETTINGS), interp


def check_root(settings: Settings) -> Check:
    root, label = settings.root, settings.label("root")
    problem = None if os.path.lexists(root) else creatable_problem(root)
    if problem is not None:
        return Check(name="root", status=WRONG, detail=f"{root} cannot be created: {problem[1]}",
                     remedy=f"set {label} to a folder this user can create", blocking=True, stage=Stage.SETTINGS)
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":
        return Check(name="root", status=WRONG, detail=f"{root}: {state.reason}",
                     remedy=f"set {label} to an empty or new folder (ensure-flydsl never overwrites others' files)",
                     blocking=True, stage=Stage.SETTINGS)
    return passed("root", f"{root} ({state.kind}{': ' + state.reason if state.reason else ''})", Stage.SETTINGS)


def check_marker_sharing(settings: Settings) -> Check:
    sharing = roots_sharing_marker(settings)
    if not sharing:
        return passed("fail-marker", f"{settings.fail_marker} is this root's alone", Stage.SETTINGS)
    advice = sharing_advice(settings, sharing)
    problem, remedy = advice.split("; give each root its own, ")
    return Check(name="fail-marker", status=WRONG, detail=problem,
                 remedy="give each root its own FLYDSL_BUILD_FAILED, " + remedy, blocking=False,
                 stage=Stage.SETTINGS)


def check_git(environ: Mapping[str, str]) -> Check:
    exe = shutil.which("git", path=environ.get("PATH"))
    if exe is None:
        return Check(name="git", status=MISSING, detail="git is not on PATH; it fetches the pin (and LLVM)",
                     remedy="install git (your OS package) or put it on PATH", blocking=True, stage=Stage.FETCH)
    try:
        out = run_captured([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=20).stdout.decode(errors="replace").strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name="git", status=WRONG, detail=f"{exe} does not run: {exc}", remedy="reinstall git",
                     blocking=True, stage=Stage.FETCH)
    return passed("git", f"{out} at {exe}", Stage.FETCH)


def _llvm_already_built(settings: Settings, needs: BuildNeeds, interp: Optional[Interpreter]) -> Optional[str]:
    """The MLIR install a previous run built from the pin's LLVM inputs (its commit, patches, build_llvm.sh,
    overrides: source/llvm_inputs.py) for this interpreter, if it is there."""
    done = finished_llvm_build(settings.base_dir)
    if done is None or needs.llvm is None or interp is None:
        return None
    key = needs.llvm.key(interp.abi)
    return mlir_install(settings.base_dir) if key is not None and done == key else None


def llvm_step_needed(settings: Settings, needs: BuildNeeds, interp: Optional[Interpreter] = None) -> bool:
    """Whether a source build runs the LLVM/MLIR step: MLIR_PATH unset and no finished build of the pin's
    LLVM inputs next to the root."""
    return settings.mlir_path is None and _llvm_already_built(settings, needs, interp) is None


def check_mlir(ctx: RunContext) -> Check:
    s = ctx.settings
    if s.mlir_path is not None:
        label = s.label("mlir_path")
        remedy = (f"point {label} at an MLIR install prefix (cmake --install of an LLVM build with mlir), or "
                  "unset it to build LLVM/MLIR")
        if not is_mlir_install(s.mlir_path):
            # ensure refuses it before anything else (bad input, 64)
            return Check(name="mlir", status=WRONG, detail=f"{label}={s.mlir_path} holds no lib/cmake/mlir",
                         remedy=remedy, blocking=True, stage=Stage.SETTINGS)
        configs = [os.path.join(s.mlir_path, "lib", "cmake", "mlir", n) for n in ("MLIRConfig.cmake",
                                                                                  "mlir-config.cmake")]
        if not any(os.path.isfile(c) for c in configs) and ctx.needs.cmake:
            return Check(name="mlir", status=WRONG,
                         detail=f"{label}={s.mlir_path} holds no lib/cmake/mlir/MLIRConfig.cmake: the "
                         "build's find_package(MLIR) will fail", remedy=remedy, blocking=True, stage=Stage.BUILD)
        return passed("mlir", f"{label}={s.mlir_path}; no LLVM build", Stage.BUILD)
    built = _llvm_already_built(s, ctx.needs, ctx.interpreter)
    llvm = ctx.needs.llvm
    if built and llvm is not None:
        return passed("mlir", f"MLIR for {llvm.describe()} is already built in {built}", Stage.LLVM)
    if llvm is not None and llvm.commit is None:
        return Check(name="mlir", status=WRONG,
                     detail=f"MLIR_PATH is unset and the pin's LLVM commit cannot be determined "
                     f"({llvm.problem}): the run builds LLVM/MLIR (the long step) every time, neither reusing "
                     "nor sharing it",
                     remedy=f"set MLIR_PATH to an MLIR install built for this pin, or give the commit "
                     f"in {llvm.commit_from}", blocking=False, stage=Stage.LLVM)
    what = f"{llvm.describe()}; " if llvm is not None else ""
    return skipped("mlir", f"MLIR_PATH is unset: the run builds LLVM/MLIR ({what}the long step)", Stage.LLVM)


def _free_bytes(path: str) -> Tuple[Optional[int], str]:
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free, path
    except OSError:
        return None, path


def check_disk(ctx: RunContext) -> Check:
    need = (LLVM_DISK_BYTES if ctx.heavy else 0) + (BUILD_DISK_BYTES if ctx.needs.cmake else SOURCE_DISK_BYTES)
    free, where = _free_bytes(ctx.settings.base_dir)
    return disk_check(free, need, where, heavy=ctx.heavy)


def check_memory(ctx: RunContext) -> Check:
    return memory_check(ctx.settings.jobs, cpu_count(), available_memory(), heavy=ctx.heavy,
                        compiles=ctx.compiles, label=ctx.settings.label("jobs"))


def _compiler(env_var: str, names: Sequence[str], environ: Mapping[str, str]) -> Tuple[Optional[List[str]], str]:
    path = environ.get("PATH")
    if environ.get(env_var):
        words = shlex.split(environ[env_var])
        exe = shutil.which(words[0], path=path) if words else None
        if exe is None:
            return None, f"{env_var}={environ[env_var]} is not found"
        return [exe] + words[1:], f"{env_var}={environ[env_var]}"
    for name in names:
        exe = shutil.which(name, path=path)
        if exe:
            return [exe], exe
    return None, f"no {' / '.join(names)} on PATH"


def check_compiler(ctx: RunContext, cxx: bool) -> Check:
    name = "c++17-compiler" if cxx else "c-compiler"
    if not ctx.compiles:
        return skipped(name, "nothing is compiled", Stage.BUILD)
    stage = ctx.tool_stage()
    cmd, where = (_compiler("CXX", ("c++", "g++", "clang++"), ctx.environ) if cxx
                  else _compiler("CC", ("cc", "gcc", "clang"), ctx.environ))
    remedy = ("install a C++17 compiler (g++ >= 8 or clang++ >= 7; e.g. the OS package build-essential) or set CXX"
              if cxx else "install a C compiler (gcc or clang) or set CC")
    if cmd is None:
        return Check(name=name, status=MISSING, detail=where, remedy=remedy, blocking=True, stage=stage)
    lang, source = ("c++", _CXX17_PROBE) if cxx else ("c", "int main(void) { return 0; }\n")
    flags = ["-std=c++17"] if cxx else []
    try:
        proc = run_captured(cmd + flags + ["-fsyntax-only", "-x", lang, "-"], input=source.encode(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name=name, status=WRONG, detail=f"{where} does not run: {exc}", remedy=remedy, blocking=True,
                     stage=stage)
    if proc.returncode != 0:
        last = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return Check(name=name, status=WRONG, detail=f"{where} cannot compile {'C++17' if cxx else 'C'}: {last[0]}",
                     remedy=remedy, blocking=True,
                     stage=stage)
    return passed(name, f"{where} compiles {'C++17' if cxx else 'C'}", stage)


def check_headers(ctx: RunContext) -> Check:
    stage = Stage.LLVM if ctx.llvm and ctx.needs.llvm_python_bindings else Stage.BUILD
    if not (ctx.needs.nanobind or (ctx.llvm and ctx.needs.llvm_python_bindings)):
        return skipped("python-headers", "no Python extension is built", stage)
    if ctx.interpreter is None:
        return skipped("python-headers", "the interpreter does not run", stage)
    header = os.path.join(ctx.interpreter.include, "Python.h")
    if os.path.isfile(header):
        return passed("python-headers", header, stage)
    version = ".".join(ctx.interpreter.version.split(".")[:2])
    return Check(name="python-headers", status=MISSING,
                 detail=f"{header} does not exist: the Python bindings cannot be compiled for "
                 f"{ctx.interpreter.executable}", remedy=f"install the interpreter's development headers (e.g. the OS "
                 f"package python{version}-dev), or set FLYDSL_PYTHON to an interpreter that has them", blocking=True,
                 stage=stage)


def check_tool(ctx: RunContext, name: str, needed: Sequence[str]) -> Check:
    """A tool the private toolchain can provide: ok on the machine, else provided from the index."""
    stage = ctx.tool_stage() if name in ("cmake", "ninja") else Stage.BUILD
    if name not in needed:
        return skipped(name, "not used by this build", stage)
    if name == "nanobind" and ctx.interpreter is None:  # asked of the interpreter: it would hang or fail again
        return skipped(name, "the interpreter does not run", stage)
    requirement, tools = tool_requirements(ctx.needs).get(name), tools_dir(ctx.settings.root)
    python = ctx.interpreter.executable if ctx.interpreter else ctx.settings.python
    state = machine_state(name, ctx.environ, python=python, requirement=requirement, tools_dir=tools)
    if state.good:
        return passed(name, state.describe(), stage)
    status = WRONG if state.found else MISSING
    spec = package_spec(name, requirement)
    answer = ctx.index.answer(name)
    yourself = "install nanobind for the interpreter" if name == "nanobind" else f"put {name} on PATH"
    found = newest(name, answer.versions, requirement) if answer.answered else None
    if found:
        return Check(name=name, status=status,
                     detail=f"{state.problem}; ensure-flydsl installs {spec} ({found}) from the package "
                     f"index into {tools}/provided for the build (nothing system-wide)",
                     remedy=f"none needed (or {yourself} yourself)", blocking=False, stage=stage, provided=True)
    if name == "ninja" and shutil.which("make", path=ctx.environ.get("PATH")):
        return Check(name=name, status=status,
                     detail=f"{state.problem}, and the package index cannot provide it; the build falls "
                     "back to make (slower)", remedy="make the package index reachable, or install ninja",
                     blocking=False, stage=stage)
    # What stood in the way, as pip said it: an index that does not answer, or no pip to ask it with.
    why = (f"the package index cannot be asked ({answer.detail})" if not answer.answered
           else f"the package index has no {spec} wheel for this machine")
    what = "import nanobind" if name == "nanobind" else f"put {name} on PATH"
    reach = ("give the interpreter pip (`python3 -m ensurepip`)" if answer.detail.endswith("has no pip")
             else "make the package index reachable (PIP_INDEX_URL, pip.conf)")
    return Check(name=name, status=status, detail=f"{state.problem}, and {why}",
                 remedy=f"{what} (e.g. from your OS packages), or {reach} so that ensure-flydsl installs it privately",
                 blocking=True, stage=stage)


def check_hip_package(ctx: RunContext) -> Check:
    needs, s = ctx.needs, ctx.settings
    if not (needs.hip or needs.hip_optional):
        return skipped("hip", "the pin's CMake files do not ask for hip", Stage.BUILD)
    blocking = needs.hip
    asked = f"{needs.hip_where} does find_package(hip{' REQUIRED' if needs.hip else ''})"
    rocm = choose_rocm(s.rocm_path, ctx.interpreter.executable if ctx.interpreter else s.python, ctx.environ)
    prefixes = [rocm.path] + [p for p in ctx.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    label = s.label("rocm_path")
    if rocm.rocm_sdk is not None:
        asked += f"; ROCm: {rocm.said(label)}"
    for prefix in prefixes:
        check = check_hip(prefix)
        if check.package_dir is None:
            continue
        if check.needs_fix and prefix != rocm.path:
            return Check(name="hip", status=WRONG,
                         detail=f"{check.package_dir} (found through CMAKE_PREFIX_PATH) names "
                         f"{', '.join(check.missing)}, which is missing",
                         remedy=f"set {label}={prefix}: ensure-flydsl then "
                         "builds with a private corrected copy of the package", blocking=blocking, stage=Stage.BUILD)
        if check.needs_fix:
            fix = (f"--fix-rocm-in-place: links {', '.join(check.missing)} inside {prefix}/lib" if s.fix_rocm_in_place
                   else f"ensure-flydsl builds with a private corrected copy of the package ({prefix} untouched)")
            return Check(name="hip", status=WRONG,
                         detail=f"{check.package_dir} names {', '.join(check.missing)}, which is missing "
                         f"(the library is {os.path.basename(str(check.actual))}); {fix}", remedy="none needed",
                         blocking=False, stage=Stage.BUILD, provided=True)
        if check.unfixable:
            return Check(name="hip", status=WRONG,
                         detail=f"{check.package_dir} names {', '.join(check.missing)}, and {prefix}/lib has "
                         "no libamdhip64 at all", remedy="install ROCm's HIP runtime (the hip-runtime-amd package) or "
                         f"point {label} at a complete ROCm", blocking=blocking, stage=Stage.BUILD)
        return passed("hip", f"{check.package_dir} (names {', '.join(check.referenced) or 'no library'}, present); "
                   f"{asked}", Stage.BUILD)
    where = " or ".join([f"{label}={s.rocm_path}"] + (["CMAKE_PREFIX_PATH"] if len(prefixes) > 1 else []))
    return Check(name="hip", status=MISSING,
                 detail=f"no hip CMake package (lib/cmake/hip) under {where}, nor from the package "
                 f"index ({rocm.tried}); {asked}",
                 remedy=f"install ROCm's HIP development files (hip-dev), or set {label} to the ROCm prefix holding "
                 "lib/cmake/hip, or install ROCm from the package index for the interpreter (its `rocm-sdk path "
                 "--root` is used then)", blocking=blocking, stage=Stage.BUILD)


def installer_python(interp: Optional[Interpreter], settings: Settings) -> str:
    """Whose pip asks the index: this tool's interpreter (it installs the private tools), else the target's."""
    if importlib.util.find_spec("pip") is not None:
        return sys.executable
    return interp.executable if interp else settings.python
