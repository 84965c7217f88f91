"""The doctor's checks, one function each: what the run will need, and whether this machine has it.

Each returns a :class:`Check` (ok / missing / wrong / skipped, the detail, the remedy, whether it blocks
the configured strategy, the step that would fail, whether the tool provides it itself).  The decisions
on figures (memory against jobs, free disk) are pure functions; the rest look at the machine with short
timeouts.  :mod:`ensure_flydsl.doctor` runs them concurrently and gives the verdict.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .build import (
    MEMORY_PER_JOB_BYTES,
    available_memory,
    cpu_count,
    default_jobs,
    is_mlir_install,
    mlir_install_of,
    tools_dir,
)
from .errors import EnsureError, ExitCode
from .fixes import check_hip
from .gitsource import is_local_repo
from .needs import BuildNeeds, resolve_in, tool_minimums
from .pkgindex import IndexAnswer, best_version, query_versions
from .probe import Interpreter, describe_interpreter
from .release import pin_as_tag, release_tags, tag_version, wheel_tags
from .settings import Settings
from .state import classify_root
from .toolchain import ToolState, machine_state, package_spec
from .util import read_json

OK, MISSING, WRONG, SKIPPED = "ok", "missing", "wrong", "skipped"
STAGE_EXIT: Dict[str, int] = {"settings": 64, "fetch": 2, "checkout": 3, "llvm": 4, "build": 5, "probe": 6,
                              "release": 8}
STAGE_ORDER = ("settings", "fetch", "checkout", "llvm", "build", "release", "probe")
GIB = 1024**3
LLVM_DISK_BYTES = 40 * GIB  # LLVM/MLIR source, build folder and install (mlir, clang, lld; three targets)
BUILD_DISK_BYTES = 5 * GIB  # FlyDSL's own build against a ready MLIR
SOURCE_DISK_BYTES = GIB // 2  # a checkout and the tool's files
LLVM_RECORD = ".llvm-project.ensure-flydsl.json"  # written by the pipeline next to llvm-project/
_CXX17_PROBE = "#include <optional>\n#include <string_view>\nint main() { std::optional<std::string_view> v; }\n"


@dataclasses.dataclass(frozen=True)
class Check:
    """One thing the configured strategy needs, and what this machine has of it."""

    name: str
    status: str  # "ok" | "missing" | "wrong" | "skipped"
    detail: str
    remedy: str
    blocking: bool  # the configured strategy cannot succeed while this stands
    stage: str  # the run's step that would fail: "settings", "fetch", "checkout", "llvm", "build", ...
    provided: bool = False  # missing here, but ensure-flydsl provides it (private toolchain, hip overlay)

    @property
    def exit_code(self) -> int:
        return STAGE_EXIT.get(self.stage, int(ExitCode.INTERNAL))

    def to_json(self) -> Dict[str, object]:
        return dataclasses.asdict(self)


def _ok(name: str, detail: str, stage: str) -> Check:
    return Check(name, OK, detail, "", False, stage)


def _skip(name: str, detail: str, stage: str) -> Check:
    return Check(name, SKIPPED, detail, "", False, stage)


# ---------------------------------------------------------------------------------------------------------
# Pure decisions (unit-tested with simulated figures)
# ---------------------------------------------------------------------------------------------------------


def memory_check(jobs_setting: Optional[int], cores: int, available: Optional[int], *, heavy: bool,
                 compiles: bool, label: str = "FLYDSL_JOBS") -> Check:
    """Build parallelism against available memory (MEMORY_PER_JOB_BYTES a job: LLVM's big links).  Too many
    jobs is a warning with the number that fits; blocking only when not even one job fits an LLVM build."""
    stage = "llvm" if heavy else "build"
    if not compiles:
        return _skip("memory", "nothing is compiled", stage)
    if available is None:
        return _skip("memory", "available memory is unknown (no /proc/meminfo)", stage)
    jobs = jobs_setting if jobs_setting is not None else default_jobs(cores, available)
    per_job = MEMORY_PER_JOB_BYTES // GIB
    have = f"{available / GIB:.1f} GiB available"
    source = f"{label}={jobs}" if jobs_setting is not None else f"{jobs} jobs by default ({cores} cores)"
    if jobs * MEMORY_PER_JOB_BYTES <= available:
        return _ok("memory", f"{source} x {per_job} GiB a job fits {have}", stage)
    fits = available // MEMORY_PER_JOB_BYTES
    if fits >= 1:
        return Check("memory", WRONG, f"{source} x {per_job} GiB a job is more than {have}: big link steps may run "
                     "out of memory (killed, exit 137)", f"set {label}={fits} (or leave it unset: the default "
                     "caps jobs by memory)", False, stage)
    return Check("memory", WRONG, f"{have}: not even one {per_job} GiB job fits; "
                 + ("LLVM's links will likely be killed" if heavy else "the build may run out of memory"),
                 "free memory or use a bigger machine" + ("; or set MLIR_PATH to a ready MLIR install to skip "
                 "the LLVM build" if heavy else ""), heavy, stage)


def disk_check(free: Optional[int], need: int, where: str, *, heavy: bool) -> Check:
    stage = "llvm" if heavy else "build"
    if free is None:
        return _skip("disk", f"cannot tell the free space at {where}", stage)
    what = "an LLVM/MLIR build and FlyDSL's" if heavy else "the build"
    detail = f"{free / GIB:.1f} GiB free at {where}; {what} needs about {need / GIB:.{0 if need >= GIB else 1}f} GiB"
    if free >= need:
        return _ok("disk", detail, stage)
    remedy = "free space there, or set FLYDSL_ROOT to a folder on a bigger file system"
    if heavy:
        remedy += ", or set MLIR_PATH to a ready MLIR install (then about 5 GiB is enough)"
    return Check("disk", MISSING, detail, remedy, True, stage)


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
        self._answers: Dict[Tuple[str, Tuple[str, ...]], "concurrent.futures.Future[IndexAnswer]"] = {}

    def answer(self, package: str, options: Sequence[str] = ()) -> IndexAnswer:
        key = (package, tuple(options))
        with self._lock:
            future = self._answers.get(key)
            owner = future is None
            if future is None:
                future = self._answers[key] = concurrent.futures.Future()
        if owner:
            try:
                future.set_result(query_versions(self.python, package, self.environ, timeout=self.timeout,
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

    def tool_stage(self) -> str:
        return "llvm" if self.heavy else "build"


def _git_env(environ: Mapping[str, str], timeout: float) -> Dict[str, str]:
    env = {k: v for k, v in environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C",
                "GIT_ALLOW_PROTOCOL": "file:https:http:ssh:git",
                # a stalled https transfer gives up after the timeout instead of curl's minutes
                "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": str(max(1, int(timeout)))})
    if "GIT_SSH_COMMAND" not in environ and "GIT_SSH" not in environ:
        env["GIT_SSH_COMMAND"] = f"ssh -o BatchMode=yes -o ConnectTimeout={max(1, int(timeout))}"
    return env


def _ls_remote(url: str, environ: Mapping[str, str], timeout: float, *refs: str) -> Tuple[bool, str]:
    """Whether ``git ls-remote url`` answers within the timeout; (ok, output or the reason)."""
    cmd = ["git", "ls-remote", "--quiet", url, *refs]
    try:
        proc = subprocess.run(cmd, env=_git_env(environ, timeout), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return False, f"cannot run git: {exc.strerror}"
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return False, lines[-1] if lines else f"git ls-remote exited with {proc.returncode}"
    return True, proc.stdout.decode(errors="replace")


def check_interpreter(settings: Settings, environ: Mapping[str, str]) -> Tuple[Check, Optional[Interpreter]]:
    label = settings.label("python")
    try:
        interp = describe_interpreter(settings.python, environ)
    except EnsureError as exc:
        return Check("interpreter", WRONG, f"{label}={settings.python}: {exc.reason}",
                     f"set {label} to the Python interpreter that will import FlyDSL", True, "settings"), None
    return _ok("interpreter", f"{interp.executable} {interp.version} ({interp.abi})", "settings"), interp


def check_root(settings: Settings) -> Check:
    root, label = settings.root, settings.label("root")
    anchor = root
    while not os.path.lexists(anchor) and os.path.dirname(anchor) != anchor:
        anchor = os.path.dirname(anchor)
    if anchor != root and not (os.path.isdir(anchor) and os.access(anchor, os.W_OK | os.X_OK)):
        return Check("root", WRONG, f"{root} cannot be created: {anchor} is not a writable folder",
                     f"set {label} to a folder this user can create", True, "settings")
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":
        return Check("root", WRONG, f"{root}: {state.reason}",
                     f"set {label} to an empty or new folder (ensure-flydsl never overwrites others' files)",
                     True, "settings")
    return _ok("root", f"{root} ({state.kind}{': ' + state.reason if state.reason else ''})", "settings")


def check_reuse(settings: Settings, environ: Mapping[str, str], interp: Optional[Interpreter]) -> Check:
    """What ``ensure`` would decide first: is there a FlyDSL to reuse (then nothing is provisioned)?"""
    blocking = settings.strategy == "reuse-only"
    remedy = ("install FlyDSL for this interpreter, or use FLYDSL_STRATEGY=auto to build the pin" if blocking
              else "none needed: the configured strategy provisions one")
    if interp is None:
        return _skip("reuse", "the interpreter does not run", "probe")
    from .context import Run  # the very decision ensure makes (late imports: the pipeline uses this module)
    from .decide import decide
    from .report import Reporter

    run = Run(settings, Reporter(None), environ)
    run.interpreter = interp
    try:
        decision = decide(run)
    except EnsureError as exc:
        return Check("reuse", WRONG, f"the import probe failed: {exc.reason}", remedy, blocking, "probe")
    if decision.ok:
        return _ok("reuse", f"reusable: {decision.reason} (ensure will reuse it; nothing is built)", "probe")
    return Check("reuse", MISSING, f"nothing to reuse: {decision.reason}", remedy, blocking, "probe")


def check_git(environ: Mapping[str, str]) -> Check:
    exe = shutil.which("git", path=environ.get("PATH"))
    if exe is None:
        return Check("git", MISSING, "git is not on PATH; it fetches the pin (and LLVM)",
                     "install git (your OS package) or put it on PATH", True, "fetch")
    try:
        out = subprocess.run([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20,
                             check=False).stdout.decode(errors="replace").strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("git", WRONG, f"{exe} does not run: {exc}", "reinstall git", True, "fetch")
    return _ok("git", f"{out} at {exe}", "fetch")


def _root_has(root: str, pin: str) -> Optional[str]:
    return resolve_in(root, pin) if os.path.isdir(os.path.join(root, ".git")) else None


def check_repository(settings: Settings, environ: Mapping[str, str], timeout: float,
                     checkout: Optional[str]) -> Check:
    repo, pin, label = settings.repo, settings.pin, settings.label("repo")
    if checkout is not None:
        return _ok("repository", f"the source is already checked out in {checkout}", "fetch")
    fetched = _root_has(settings.root, pin)
    if is_local_repo(repo):
        path = repo[len("file://"):] if repo.startswith("file://") else repo
        if not os.path.isdir(path):
            return Check("repository", MISSING, f"{label}={repo}: {path} does not exist",
                         f"point {label} at a FlyDSL clone or mirror", fetched is None, "fetch")
        commit = resolve_in(path, pin)
        if commit is None:
            return Check("repository", WRONG, f"the pin {pin} is not a commit, tag or branch of {repo}",
                         "check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)", fetched is None,
                         "checkout")
        return _ok("repository", f"local repository {path}; the pin is commit {commit[:12]}", "fetch")
    answered, out = _ls_remote(repo, environ, timeout)
    if not answered:
        if fetched is not None:
            return Check("repository", MISSING, f"{repo} does not answer ({out}), but the pin is already fetched "
                         f"into {settings.root} (commit {fetched[:12]})", "none needed for this pin", False, "fetch")
        return Check("repository", MISSING, f"{repo} does not answer: {out}",
                     f"check the network, or point {label} at a reachable mirror (a local path works)", True,
                     "fetch")
    if re.fullmatch(r"[0-9a-fA-F]{40}", pin):
        return _ok("repository", f"{repo} answers (the pin is a commit hash, fetched by hash)", "fetch")
    refs = {line.split("\t", 1)[1].strip() for line in out.splitlines() if "\t" in line}
    if {f"refs/tags/{pin}", f"refs/heads/{pin}"} & refs:
        return _ok("repository", f"{repo} answers and has {pin}", "fetch")
    return Check("repository", WRONG, f"{repo} answers, but has no tag or branch {pin}",
                 "check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)", True, "checkout")


def _llvm_already_built(settings: Settings, needs: BuildNeeds) -> Optional[str]:
    """The MLIR install a previous run built for this LLVM commit, if it is there."""
    install = mlir_install_of(settings.base_dir)
    record = read_json(os.path.join(settings.base_dir, LLVM_RECORD)) or {}
    done = record.get("done")
    if (needs.llvm_commit and isinstance(done, dict) and done.get("llvm_commit") == needs.llvm_commit
            and is_mlir_install(install)):
        return install
    return None


def llvm_step_needed(settings: Settings, needs: BuildNeeds) -> bool:
    """Whether a source build runs the LLVM/MLIR step: MLIR_PATH unset and no finished build of the pin's
    LLVM commit next to the root."""
    return settings.mlir_path is None and _llvm_already_built(settings, needs) is None


def check_mlir(ctx: RunContext) -> Check:
    s = ctx.settings
    if s.mlir_path is not None:
        label = s.label("mlir_path")
        remedy = (f"point {label} at an MLIR install prefix (cmake --install of an LLVM build with mlir), or "
                  "unset it to build LLVM/MLIR")
        if not is_mlir_install(s.mlir_path):
            # ensure refuses it before anything else (bad input, 64)
            return Check("mlir", WRONG, f"{label}={s.mlir_path} holds no lib/cmake/mlir", remedy, True, "settings")
        configs = [os.path.join(s.mlir_path, "lib", "cmake", "mlir", n) for n in ("MLIRConfig.cmake",
                                                                                  "mlir-config.cmake")]
        if not any(os.path.isfile(c) for c in configs) and ctx.needs.cmake:
            return Check("mlir", WRONG, f"{label}={s.mlir_path} holds no lib/cmake/mlir/MLIRConfig.cmake: the "
                         "build's find_package(MLIR) will fail", remedy, True, "build")
        return _ok("mlir", f"{label}={s.mlir_path}; no LLVM build", "build")
    built = _llvm_already_built(s, ctx.needs)
    if built:
        return _ok("mlir", f"MLIR for LLVM {str(ctx.needs.llvm_commit)[:12]} is already built in {built}", "llvm")
    return _skip("mlir", "MLIR_PATH is unset: the run builds LLVM/MLIR (the long step)", "llvm")


def check_llvm_source(ctx: RunContext) -> Check:
    needs = ctx.needs
    if not ctx.llvm:
        return _skip("llvm-source", "no LLVM build", "llvm")
    if needs.llvm_remote is None:
        return _skip("llvm-source", "build_llvm.sh does not clone llvm-project", "llvm")
    commit = needs.llvm_commit
    local = os.path.join(ctx.settings.base_dir, "llvm-project")
    if commit and os.path.isdir(os.path.join(local, ".git")) and resolve_in(local, commit):
        return _ok("llvm-source", f"LLVM {commit[:12]} is already in {local}", "llvm")
    remote = ctx.environ.get("LLVM_REMOTE") or needs.llvm_remote
    remedy = (f"set MLIR_PATH to an MLIR install built from LLVM {commit[:12] if commit else 'at the pin'} "
              f"(thirdparty/llvm-hash.txt), or LLVM_REMOTE to a reachable mirror of llvm-project")
    if is_local_repo(remote):
        path = remote[len("file://"):] if remote.startswith("file://") else remote
        if os.path.isdir(path):
            return _ok("llvm-source", f"LLVM is cloned from the local {path}", "llvm")
        return Check("llvm-source", MISSING, f"LLVM_REMOTE={remote} does not exist", remedy, True, "llvm")
    answered, out = _ls_remote(remote, ctx.environ, ctx.timeout, "HEAD")
    if answered:
        return _ok("llvm-source", f"{remote} answers (build_llvm.sh clones LLVM from it)", "llvm")
    return Check("llvm-source", MISSING, f"build_llvm.sh clones LLVM from {remote}, which does not answer: {out}",
                 remedy, True, "llvm")


def _submodule_url(url: str, repo: str) -> str:
    """A submodule URL as git resolves it: ``../x`` and ``./x`` are relative to the superproject's URL."""
    if not url.startswith(("./", "../")):
        return url
    base = repo.rstrip("/")
    for part in url.split("/"):
        if part == "..":
            base = base.rsplit("/", 1)[0] if "/" in base else base
        elif part not in (".", ""):
            base = f"{base}/{part}"
    return base


def check_submodules(ctx: RunContext, checkout: Optional[str]) -> Check:
    """A source build fetches the pin's submodules first: those whose repository does not answer stop it."""
    subs = ctx.needs.submodules
    if not ctx.needs.read:
        return _skip("submodules", "the pin's source could not be read (see the repository check)", "fetch")
    if not subs:
        return _skip("submodules", "the pin has no submodules", "fetch")
    unreachable: List[str] = []
    for path, url in subs:
        if any(top and os.path.exists(os.path.join(top, path, ".git")) for top in (checkout, ctx.settings.root)):
            continue  # already fetched into the checkout
        where = _submodule_url(url, ctx.settings.repo)
        if is_local_repo(where):
            local = where[len("file://"):] if where.startswith("file://") else where
            if not os.path.isdir(local):
                unreachable.append(f"{path} ({local} does not exist)")
            continue
        answered, out = _ls_remote(where, ctx.environ, ctx.timeout, "HEAD")
        if not answered:
            unreachable.append(f"{path} ({where}: {out})")
    if unreachable:
        return Check("submodules", MISSING, "the pin's submodules cannot be fetched: " + "; ".join(unreachable),
                     "make them reachable, or mirror them and point git there "
                     "(git config --global url.<mirror>.insteadOf <url>)", True, "fetch")
    return _ok("submodules", f"{len(subs)} submodule(s) can be fetched: " + ", ".join(p for p, _ in subs), "fetch")


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
        return _skip(name, "nothing is compiled", "build")
    stage = ctx.tool_stage()
    cmd, where = (_compiler("CXX", ("c++", "g++", "clang++"), ctx.environ) if cxx
                  else _compiler("CC", ("cc", "gcc", "clang"), ctx.environ))
    remedy = ("install a C++17 compiler (g++ >= 8 or clang++ >= 7; e.g. the OS package build-essential) or set CXX"
              if cxx else "install a C compiler (gcc or clang) or set CC")
    if cmd is None:
        return Check(name, MISSING, where, remedy, True, stage)
    lang, source = ("c++", _CXX17_PROBE) if cxx else ("c", "int main(void) { return 0; }\n")
    flags = ["-std=c++17"] if cxx else []
    try:
        proc = subprocess.run(cmd + flags + ["-fsyntax-only", "-x", lang, "-"], input=source.encode(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name, WRONG, f"{where} does not run: {exc}", remedy, True, stage)
    if proc.returncode != 0:
        last = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return Check(name, WRONG, f"{where} cannot compile {'C++17' if cxx else 'C'}: {last[0]}", remedy, True,
                     stage)
    return _ok(name, f"{where} compiles {'C++17' if cxx else 'C'}", stage)


def check_headers(ctx: RunContext) -> Check:
    stage = "llvm" if ctx.llvm and ctx.needs.llvm_python_bindings else "build"
    if not (ctx.needs.nanobind or (ctx.llvm and ctx.needs.llvm_python_bindings)):
        return _skip("python-headers", "no Python extension is built", stage)
    if ctx.interpreter is None:
        return _skip("python-headers", "the interpreter does not run", stage)
    header = os.path.join(ctx.interpreter.include, "Python.h")
    if os.path.isfile(header):
        return _ok("python-headers", header, stage)
    version = ".".join(ctx.interpreter.version.split(".")[:2])
    return Check("python-headers", MISSING, f"{header} does not exist: the Python bindings cannot be compiled for "
                 f"{ctx.interpreter.executable}", f"install the interpreter's development headers (e.g. the OS "
                 f"package python{version}-dev), or set FLYDSL_PYTHON to an interpreter that has them", True, stage)


def check_tool(ctx: RunContext, name: str, needed: Sequence[str]) -> Check:
    """A tool the private toolchain can provide: ok on the machine, else provided from the index."""
    stage = ctx.tool_stage() if name in ("cmake", "ninja") else "build"
    if name not in needed:
        return _skip(name, "not used by this build", stage)
    minimum = tool_minimums(ctx.needs).get(name)
    python = ctx.interpreter.executable if ctx.interpreter else ctx.settings.python
    state: ToolState = machine_state(name, ctx.environ, python=python, minimum=minimum,
                                     tools_dir=tools_dir(ctx.settings.root))
    if state.good:
        return _ok(name, state.describe(), stage)
    status = WRONG if state.found else MISSING
    spec = package_spec(name, minimum)
    answer = ctx.index.answer(name)
    yourself = "install nanobind for the interpreter" if name == "nanobind" else f"put {name} on PATH"
    if answer.answered and best_version(answer.versions, minimum=minimum):
        return Check(name, status, f"{state.problem}; ensure-flydsl installs {spec} "
                     f"({best_version(answer.versions, minimum=minimum)}) from the package index into "
                     f"{tools_dir(ctx.settings.root)}/provided for the build (nothing system-wide)",
                     f"none needed (or {yourself} yourself)", False, stage, provided=True)
    if name == "ninja" and shutil.which("make", path=ctx.environ.get("PATH")):
        return Check(name, status, f"{state.problem}, and the package index cannot provide it; the build falls "
                     "back to make (slower)", "make the package index reachable, or install ninja", False, stage)
    why = ("the package index does not answer" if not answer.answered
           else f"the package index has no {spec} wheel for this machine")
    what = "import nanobind" if name == "nanobind" else f"put {name} on PATH"
    return Check(name, status, f"{state.problem}, and {why}",
                 f"{what} (e.g. from your OS packages), or make the package index reachable (PIP_INDEX_URL, "
                 "pip.conf) so that ensure-flydsl installs it privately", True, stage)


def check_hip_package(ctx: RunContext) -> Check:
    needs, s = ctx.needs, ctx.settings
    if not (needs.hip or needs.hip_optional):
        return _skip("hip", "the pin's CMake files do not ask for hip", "build")
    blocking = needs.hip
    asked = f"{needs.hip_where} does find_package(hip{' REQUIRED' if needs.hip else ''})"
    prefixes = [s.rocm_path] + [p for p in ctx.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    label = s.label("rocm_path")
    for prefix in prefixes:
        check = check_hip(prefix)
        if check.package_dir is None:
            continue
        if check.needs_fix and prefix != s.rocm_path:
            return Check("hip", WRONG, f"{check.package_dir} (found through CMAKE_PREFIX_PATH) names "
                         f"{', '.join(check.missing)}, which is missing", f"set {label}={prefix}: ensure-flydsl then "
                         "builds with a private corrected copy of the package", blocking, "build")
        if check.needs_fix:
            fix = (f"--fix-rocm-in-place: links {', '.join(check.missing)} inside {prefix}/lib" if s.fix_rocm_in_place
                   else f"ensure-flydsl builds with a private corrected copy of the package ({prefix} untouched)")
            return Check("hip", WRONG, f"{check.package_dir} names {', '.join(check.missing)}, which is missing "
                         f"(the library is {os.path.basename(str(check.actual))}); {fix}", "none needed",
                         False, "build", provided=True)
        if check.unfixable:
            return Check("hip", WRONG, f"{check.package_dir} names {', '.join(check.missing)}, and {prefix}/lib has "
                         "no libamdhip64 at all", "install ROCm's HIP runtime (the hip-runtime-amd package) or "
                         f"point {label} at a complete ROCm", blocking, "build")
        return _ok("hip", f"{check.package_dir} (names {', '.join(check.referenced) or 'no library'}, present); "
                   f"{asked}", "build")
    where = " or ".join([f"{label}={s.rocm_path}"] + (["CMAKE_PREFIX_PATH"] if len(prefixes) > 1 else []))
    return Check("hip", MISSING, f"no hip CMake package (lib/cmake/hip) under {where}; {asked}",
                 f"install ROCm's HIP development files (hip-dev), or set {label} to the ROCm prefix holding "
                 "lib/cmake/hip", blocking, "build")


def check_index(ctx: RunContext, release: bool) -> Check:
    """Whether pip reaches the package index; needed when something is installed from it."""
    stage = "release" if release else ("llvm" if ctx.llvm and ctx.needs.llvm_pip else "build")
    asked = ctx.index.asked()
    if not asked and ctx.llvm and ctx.needs.llvm_pip:
        asked = [ctx.index.answer(ctx.needs.llvm_pip[0])]
    if not asked:
        return _skip("package-index", "nothing is installed from it", stage)
    answered = [a for a in asked if a.answered]
    if answered:
        return _ok("package-index", f"pip ({ctx.index.python}) answers for {', '.join(a.package for a in answered)}",
                   stage)
    why = "; ".join(f"{a.package}: {a.detail.splitlines()[-1] if a.detail else 'no answer'}" for a in asked)
    needed_by = ("the release wheel" if release else
                 "build_llvm.sh's pip install " + " ".join(ctx.needs.llvm_pip) if ctx.llvm and ctx.needs.llvm_pip
                 else "the private build tools")
    blocking = release or (ctx.llvm and bool(ctx.needs.llvm_pip))
    return Check("package-index", MISSING, f"pip does not reach the package index ({why}); needed for {needed_by}",
                 "check the network or pip's configuration (PIP_INDEX_URL, pip.conf); a local mirror works",
                 blocking, stage)


def release_version_of_pin(settings: Settings, checkout: Optional[str]) -> Tuple[Optional[str], str, bool]:
    """(X, how it is known, True) when the pin is the release vX (a tag, a version, or a commit a release
    tag points at in a local repository); (None, why not, known) otherwise, ``known`` False when only a
    fetch can tell.  As provision.release_version decides after the fetch."""
    tag = pin_as_tag(settings.pin)
    version = tag_version(tag)
    if version is not None:
        return version, f"the pin names the release tag {tag}", True
    candidates = [p for p in (checkout, settings.root) if p and os.path.isdir(os.path.join(p, ".git"))]
    if is_local_repo(settings.repo):
        candidates.append(settings.repo[len("file://"):] if settings.repo.startswith("file://") else settings.repo)
    for path in candidates:
        commit = resolve_in(path, settings.pin)
        if commit is None:
            continue
        try:
            out = subprocess.run(["git", "-C", path, "tag", "--points-at", commit], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, timeout=30, check=False).stdout.decode()
        except (OSError, subprocess.TimeoutExpired):
            continue
        versions = release_tags(out.split())
        if versions:
            return versions[0], f"commit {commit[:12]} is the release tag v{versions[0]}", True
        return None, f"the pin (commit {commit[:12]}) is not the commit of a release tag vX.Y.Z", True
    return None, "the pin's release is known only after fetching", False


def check_release(ctx: RunContext, checkout: Optional[str], *, demanded: bool) -> Check:
    """A flydsl wheel for the target interpreter (asked with the install's own options).  ``demanded``:
    FLYDSL_STRATEGY=release (blocking); else auto's first choice (never blocking: it falls back)."""
    if ctx.interpreter is None:
        return _skip("release-wheel", "the interpreter does not run", "release")
    version, how, known = release_version_of_pin(ctx.settings, checkout)
    if version is None and not demanded:
        return _skip("release-wheel", f"auto builds from source: {how}", "release")
    if version is None and known:
        return Check("release-wheel", WRONG, how, "pin a release tag (for example v0.2.2) or a version, or use "
                     "FLYDSL_STRATEGY=source", True, "release")
    try:
        options = wheel_tags(ctx.interpreter)
    except EnsureError as exc:
        return Check("release-wheel", WRONG, exc.reason, "use a CPython interpreter, or FLYDSL_STRATEGY=source",
                     demanded, "release")
    answer = ctx.index.answer("flydsl", options)
    wanted = f"flydsl=={version}" if version else f"flydsl >= {ctx.settings.min_version}"
    abi = options[options.index("--abi") + 1]
    if not answer.answered:
        return Check("release-wheel", MISSING, f"cannot ask the package index for {wanted}: {answer.detail}",
                     "check the network or pip's configuration (PIP_INDEX_URL, pip.conf)", demanded, "release")
    found = best_version(answer.versions, exact=version, minimum=None if version else ctx.settings.min_version)
    if found:
        return _ok("release-wheel", f"{how}; the package index has a flydsl {found} wheel for {abi}", "release")
    listed = ", ".join(answer.versions[:5]) or "none"
    fallback = "" if demanded else "; auto builds from source instead"
    return Check("release-wheel", MISSING, f"{how}, but the package index has no {wanted} wheel for {abi} "
                 f"(versions it has for {abi}: {listed}){fallback}", "use FLYDSL_STRATEGY=source to build the pin, "
                 "or set FLYDSL_PYTHON to an interpreter FlyDSL publishes wheels for (cp310-cp314)", demanded,
                 "release")


def installer_python(interp: Optional[Interpreter], settings: Settings) -> str:
    """Whose pip asks the index: this tool's interpreter (it installs the private tools), else the target's."""
    if importlib.util.find_spec("pip") is not None:
        return sys.executable
    return interp.executable if interp else settings.python
