"""The source way's prediction: the doctor's checks of what a build needs (LLVM's source, MLIR, disk, memory,
compilers, headers, build tools, HIP, submodules) in the order a build meets them, with short timeouts."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shlex
import shutil
import subprocess
from typing import List, Mapping, Optional, Sequence, Tuple
from urllib.parse import urljoin

from ensure_flydsl.errors import Stage
from ensure_flydsl.layout import llvm_dir, tools_dir
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import is_local_repo, resolve_in, rewrite
from ensure_flydsl.source.needs import BuildNeeds, build_tools
from ensure_flydsl.support import processes
from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.support.space import size_text
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, RunContext, Submit, no_mirror, passed, reach, skipped
from ensure_flydsl.ways.source import environment, prebuilt
from ensure_flydsl.ways.source.tools import PROVIDABLE, machine_state, newest, package_spec

GIB = 1024**3
LLVM_DISK_BYTES = 40 * GIB  # LLVM/MLIR source, build folder and install (mlir, clang, lld; three targets)
BUILD_DISK_BYTES = 5 * GIB  # FlyDSL's own build against a ready MLIR
SOURCE_DISK_BYTES = GIB // 2  # a checkout and the tool's files
_CXX17_PROBE = "#include <optional>\n#include <string_view>\nint main() { std::optional<std::string_view> v; }\n"


def predict_build(ctx: RunContext, checkout: Optional[str], submit: Submit) -> List[concurrent.futures.Future[Check]]:
    tools = build_tools(ctx.needs, llvm=ctx.llvm)
    memory = (ctx.settings.jobs, environment.cpu_count(), environment.available_memory())
    return ([submit(check_llvm_source, ctx), submit(check_mlir, ctx), submit(check_disk, ctx),
             submit(memory_check, *memory, heavy=ctx.heavy, compiles=ctx.compiles, label=ctx.settings.label("jobs")),
             submit(check_compiler, ctx, False), submit(check_compiler, ctx, True), submit(check_headers, ctx)]
            + [submit(check_tool, ctx, name, tools) for name in PROVIDABLE]
            + [submit(check_hip_package, ctx), submit(check_submodules, ctx, checkout)])


def llvm_step_needed(settings: Settings, needs: BuildNeeds, interp: Optional[Interpreter]) -> bool:
    return settings.mlir_path is None and environment.built_mlir(settings.base_dir, needs.llvm, interp) is None


def check_mlir(ctx: RunContext) -> Check:
    s = ctx.settings
    if s.mlir_path is not None:
        label = s.label("mlir_path")
        remedy = (f"point {label} at an MLIR install prefix (cmake --install of an LLVM build with mlir), or "
                  "unset it to build LLVM/MLIR")
        if not environment.is_mlir_install(s.mlir_path):  # ensure refuses it as bad input
            return Check("mlir", WRONG, f"{label}={s.mlir_path} holds no lib/cmake/mlir", remedy, blocking=True,
                         stage=Stage.SETTINGS)
        configs = ("MLIRConfig.cmake", "mlir-config.cmake")
        if ctx.needs.cmake and not any(os.path.isfile(os.path.join(s.mlir_path, "lib/cmake/mlir", c)) for c in configs):
            return Check("mlir", WRONG, f"{label}={s.mlir_path} holds no lib/cmake/mlir/MLIRConfig.cmake: the "
                         "build's find_package(MLIR) will fail", remedy, blocking=True, stage=Stage.BUILD)
        return passed("mlir", f"{label}={s.mlir_path}; no LLVM build", Stage.BUILD)
    built = environment.built_mlir(s.base_dir, ctx.needs.llvm, ctx.interpreter)
    llvm = ctx.needs.llvm
    if built and llvm is not None:
        return passed("mlir", f"MLIR for {llvm.describe()} is already built in {built}", Stage.LLVM)
    if llvm is not None and llvm.commit is None:
        return Check("mlir", WRONG,
                     f"MLIR_PATH is unset and the pin's LLVM commit cannot be determined ({llvm.problem}): the run "
                     "builds LLVM/MLIR (the long step) every time, neither reusing nor sharing it",
                     f"set MLIR_PATH to an MLIR install built for this pin, or give the commit in {llvm.commit_from}",
                     blocking=False, stage=Stage.LLVM)
    if llvm is not None and llvm.commit is not None and s.mlir_url != prebuilt.OFF:
        return check_prebuilt(s, llvm.commit, processes.network_silence_s(ctx.environ))
    what = f"{llvm.describe()}; " if llvm is not None else ""
    return skipped("mlir", f"MLIR_PATH is unset: the run builds LLVM/MLIR ({what}the long step); "
                   f"{prebuilt.SUGGESTION}", Stage.LLVM)


def check_prebuilt(s: Settings, commit: str, timeout: float) -> Check:
    """Whether the run would take FLYDSL_MLIR_URL's prebuilt: the URL it resolves to, reachable, its size."""
    label = f"{s.label('mlir_url')}={s.mlir_url}"
    try:
        url = prebuilt.resolve(s.mlir_url, commit)
        with prebuilt.opened(url, min(timeout, 20.0)) as (found, size, _):
            pass
    except prebuilt.Unusable as exc:
        return Check("mlir", WRONG, f"{label}: {exc}; the run would build LLVM/MLIR instead (the long step)",
                     f"fix {s.label('mlir_url')}, or set it to off", blocking=False, stage=Stage.LLVM)
    shown = shown_location(found) + (f" ({size_text(size)})" if size is not None else "")
    return passed("mlir", f"{label}: {shown} answers; the run downloads it and builds no LLVM, if its content names "
                  f"LLVM {commit[:12]}", Stage.LLVM)


def memory_check(jobs_setting: Optional[int], cores: int, available: Optional[int], *, heavy: bool,
                 compiles: bool, label: str = "FLYDSL_JOBS") -> Check:
    """Jobs against available memory (MEMORY_PER_JOB_BYTES each: LLVM's big links): too many is a warning with
    the number that fits, blocking only when not even one job fits an LLVM build."""
    stage = Stage.LLVM if heavy else Stage.BUILD
    if not compiles:
        return skipped("memory", "nothing is compiled", stage)
    if available is None:
        return skipped("memory", "available memory is unknown (no /proc/meminfo)", stage)
    jobs = jobs_setting if jobs_setting is not None else environment.default_jobs(cores, available)
    per_job = environment.MEMORY_PER_JOB_BYTES // GIB
    have = f"{available / GIB:.1f} GiB available"
    source = f"{label}={jobs}" if jobs_setting is not None else f"{jobs} jobs by default ({cores} cores)"
    if jobs * environment.MEMORY_PER_JOB_BYTES <= available:
        return passed("memory", f"{source} x {per_job} GiB a job fits {have}", stage)
    fits = available // environment.MEMORY_PER_JOB_BYTES
    if fits >= 1:
        return Check("memory", WRONG, f"{source} x {per_job} GiB a job is more than {have}: big link steps may run "
                     "out of memory (killed, exit 137)",
                     f"set {label}={fits} (or leave it unset: the default caps jobs by memory)",
                     blocking=False, stage=stage)
    return Check("memory", WRONG,
                 f"{have}: not even one {per_job} GiB job fits; "
                 + ("LLVM's links will likely be killed" if heavy else "the build may run out of memory"),
                 "free memory or use a bigger machine"
                 + ("; or set MLIR_PATH to a ready MLIR install to skip the LLVM build" if heavy else ""),
                 blocking=heavy, stage=stage)


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
    return Check("disk", MISSING, detail, remedy, blocking=True, stage=stage)


def check_disk(ctx: RunContext) -> Check:
    need = (LLVM_DISK_BYTES if ctx.heavy else 0) + (BUILD_DISK_BYTES if ctx.needs.cmake else SOURCE_DISK_BYTES)
    where = ctx.settings.base_dir
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    free: Optional[int] = None
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(where).free
    return disk_check(free, need, where, heavy=ctx.heavy)


def _compiler(env_var: str, names: Sequence[str], environ: Mapping[str, str]) -> Tuple[Optional[List[str]], str]:
    path = environ.get("PATH")
    if environ.get(env_var):
        words = shlex.split(environ[env_var])
        exe = shutil.which(words[0], path=path) if words else None
        if exe is None:
            return None, f"{env_var}={environ[env_var]} is not found"
        return [exe] + words[1:], f"{env_var}={environ[env_var]}"
    found = next(filter(None, (shutil.which(name, path=path) for name in names)), None)
    return ([found], found) if found else (None, f"no {' / '.join(names)} on PATH")


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
        return Check(name, MISSING, where, remedy, blocking=True, stage=stage)
    lang, source = ("c++", _CXX17_PROBE) if cxx else ("c", "int main(void) { return 0; }\n")
    flags = ["-std=c++17"] if cxx else []
    try:
        proc = run_captured(cmd + flags + ["-fsyntax-only", "-x", lang, "-"], input=source.encode(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, WRONG, f"{where} does not run: {exc}", remedy, blocking=True, stage=stage)
    if proc.returncode != 0:
        last = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return Check(name, WRONG, f"{where} cannot compile {'C++17' if cxx else 'C'}: {last[0]}", remedy,
                     blocking=True, stage=stage)
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
    return Check("python-headers", MISSING,
                 f"{header} does not exist: the Python bindings cannot be compiled for {ctx.interpreter.executable}",
                 f"install the interpreter's development headers (e.g. the OS package python{version}-dev), or set "
                 "FLYDSL_PYTHON to an interpreter that has them", blocking=True, stage=stage)


def check_tool(ctx: RunContext, name: str, needed: Mapping[str, Optional[str]]) -> Check:
    """A tool the private toolchain can provide: ok on the machine, else provided from the index."""
    stage = ctx.tool_stage() if name in ("cmake", "ninja") else Stage.BUILD
    if name not in needed:
        return skipped(name, "not used by this build", stage)
    if name == "nanobind" and ctx.interpreter is None:  # asked of the interpreter: it would hang or fail again
        return skipped(name, "the interpreter does not run", stage)
    requirement, tools = needed[name], tools_dir(ctx.settings.root)
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
        return Check(name, status, f"{state.problem}; ensure-flydsl installs {spec} ({found}) from the package index "
                     f"into {tools}/provided for the build (nothing system-wide)",
                     f"none needed (or {yourself} yourself)", blocking=False, stage=stage, provided=True)
    if name == "ninja" and shutil.which("make", path=ctx.environ.get("PATH")):
        return Check(name, status, f"{state.problem}, and the package index cannot provide it; the build falls "
                     "back to make (slower)", "make the package index reachable, or install ninja",
                     blocking=False, stage=stage)
    why = (f"the package index cannot be asked ({answer.detail})" if not answer.answered
           else f"the package index has no {spec} wheel for this machine")
    what = "import nanobind" if name == "nanobind" else f"put {name} on PATH"
    reach_it = ("give the interpreter pip (`python3 -m ensurepip`)" if answer.detail.endswith("has no pip")
                else "make the package index reachable (PIP_INDEX_URL, pip.conf)")
    return Check(name, status, f"{state.problem}, and {why}",
                 f"{what} (e.g. from your OS packages), or {reach_it} so that ensure-flydsl installs it privately",
                 blocking=True, stage=stage)


def check_llvm_source(ctx: RunContext) -> Check:
    needs = ctx.needs
    if not ctx.llvm:
        return skipped("llvm-source", "no LLVM build", Stage.LLVM)
    if needs.llvm_remote is None:
        return skipped("llvm-source", "build_llvm.sh does not clone llvm-project", Stage.LLVM)
    commit = needs.llvm_commit
    local = llvm_dir(ctx.settings.base_dir)
    if commit and os.path.isdir(os.path.join(local, ".git")) and resolve_in(local, commit):
        return passed("llvm-source", f"LLVM {commit[:12]} is already in {local}", Stage.LLVM)
    remote = ctx.environ.get("LLVM_REMOTE") or needs.llvm_remote
    named = f"named in {needs.llvm.commit_from}" if needs.llvm is not None else "the pin names"
    answered, out, shown = reach(remote, ctx.environ, ctx.timeout, ctx.settings, "HEAD")
    if answered:
        return passed("llvm-source", f"build_llvm.sh clones LLVM from {shown}, which answers", Stage.LLVM)
    return Check("llvm-source", MISSING,
                 f"build_llvm.sh clones LLVM from {shown}, which cannot be fetched: {out}"
                 f"{no_mirror(remote, ctx.settings)}",
                 f"set MLIR_PATH to an MLIR install built from LLVM {commit[:12] if commit else 'at the pin'} "
                 f"({named}), or LLVM_REMOTE to a reachable mirror of llvm-project (or map its URL with "
                 "FLYDSL_GIT_MIRRORS=FROM=TO)", blocking=True, stage=Stage.LLVM)


def check_submodules(ctx: RunContext, checkout: Optional[str]) -> Check:
    """A build fetches the pin's submodules first: one whose repository does not answer stops it."""
    subs = ctx.needs.submodules
    if not ctx.needs.read:
        return skipped("submodules", "the pin's source could not be read (see the repository check)", Stage.SUBMODULES)
    if not subs:
        return skipped("submodules", "the pin has no submodules", Stage.SUBMODULES)
    unreachable: List[str] = []
    served: List[str] = []
    for path, url in subs:
        if any(top and os.path.exists(os.path.join(top, path, ".git")) for top in (checkout, ctx.settings.root)):
            served.append(f"{path} (already fetched)")
            continue
        # git resolves ``../x`` and ``./x`` against the superproject's URL as if it were a folder
        where = urljoin(ctx.settings.repo.rstrip("/") + "/", url) if url.startswith(("./", "../")) else url
        answered, out, shown = reach(where, ctx.environ, ctx.timeout, ctx.settings, "HEAD")
        served.append(f"{path} from {shown}")
        if not answered:
            local = is_local_repo(rewrite(where, ctx.settings.git_mirrors)[0])
            unreachable.append(f"{path} ({out})" if local and shown == where else
                               f"{path} ({shown}: {out}{no_mirror(where, ctx.settings)})")
    if unreachable:
        return Check("submodules", MISSING, "the pin's submodules cannot be fetched: " + "; ".join(unreachable),
                     "make them reachable, or mirror them and map their URLs with FLYDSL_GIT_MIRRORS=FROM=TO (a URL "
                     "prefix, such as https://github.com/=https://git.example.internal/github/)",
                     blocking=True, stage=Stage.SUBMODULES)
    return passed("submodules", f"{len(subs)} submodule(s) can be fetched: " + ", ".join(served), Stage.SUBMODULES)


def check_hip_package(ctx: RunContext) -> Check:
    needs, s = ctx.needs, ctx.settings
    if not (needs.hip or needs.hip_optional):
        return skipped("hip", "the pin's CMake files do not ask for hip", Stage.BUILD)
    blocking = needs.hip
    asked = f"{needs.hip_where} does find_package(hip{' REQUIRED' if needs.hip else ''})"
    python = ctx.interpreter.executable if ctx.interpreter else s.python
    rocm = environment.choose_rocm(s.rocm_path, python, ctx.environ)
    prefixes = [rocm.path] + [p for p in ctx.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    label = s.label("rocm_path")
    if rocm.rocm_sdk is not None:
        asked += f"; ROCm: {rocm.said(label)}"
    for prefix in prefixes:
        check = environment.check_hip(prefix)
        if check.package_dir is None:
            continue
        missing = ", ".join(check.missing)
        if check.needs_fix and prefix != rocm.path:
            return Check("hip", WRONG, f"{check.package_dir} (found through CMAKE_PREFIX_PATH) names {missing}, "
                         "which is missing",
                         f"set {label}={prefix}: ensure-flydsl then builds with a private corrected copy of the "
                         "package",
                         blocking=blocking, stage=Stage.BUILD)
        if check.needs_fix:
            fix = (f"--fix-rocm-in-place: links {missing} inside {prefix}/lib" if s.fix_rocm_in_place
                   else f"ensure-flydsl builds with a private corrected copy of the package ({prefix} untouched)")
            return Check("hip", WRONG, f"{check.package_dir} names {missing}, which is missing (the library is "
                         f"{os.path.basename(str(check.actual))}); {fix}", "none needed", blocking=False,
                         stage=Stage.BUILD, provided=True)
        if check.unfixable:
            return Check("hip", WRONG,
                         f"{check.package_dir} names {missing}, and {prefix}/lib has no libamdhip64 at all",
                         f"install ROCm's HIP runtime (the hip-runtime-amd package) or point {label} at a "
                         "complete ROCm",
                         blocking=blocking, stage=Stage.BUILD)
        return passed("hip", f"{check.package_dir} (names {', '.join(check.referenced) or 'no library'}, present); "
                      f"{asked}", Stage.BUILD)
    where = " or ".join([f"{label}={s.rocm_path}"] + (["CMAKE_PREFIX_PATH"] if len(prefixes) > 1 else []))
    return Check("hip", MISSING,
                 f"no hip CMake package (lib/cmake/hip) under {where}, nor from the package index ({rocm.tried}); "
                 f"{asked}",
                 f"install ROCm's HIP development files (hip-dev), or set {label} to the ROCm prefix holding "
                 "lib/cmake/hip, or install ROCm from the package index for the interpreter (its `rocm-sdk path "
                 "--root` is used then)", blocking=blocking, stage=Stage.BUILD)
