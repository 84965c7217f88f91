"""What a source build of the pin needs (HIP, patchelf, nanobind, CMake, the LLVM step), read from the pin's own
build files in a checkout or a local repository; FlyDSL's known needs are assumed only when neither can be read."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.version import InvalidVersion, Version

from ensure_flydsl.layout import BUILD_DIR, STATE_DIR
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import CheckoutFiles, CommitFiles, PinFiles, pin_commits, read_texts
from ensure_flydsl.source.llvm_inputs import (
    COMMIT_FILES,
    LLVM_SCRIPT,
    LlvmInputs,
    code_lines,
    pin_llvm_inputs,
    read_llvm_inputs,
)
from ensure_flydsl.support.processes import CommandFailed

MIN_CMAKE = "3.20"  # LLVM's own minimum: never ask for less
DEFAULT_LLVM_REMOTE = "https://github.com/llvm/llvm-project.git"
GITMODULES = ".gitmodules"
_SKIPPED_DIRS = ("thirdparty", BUILD_DIR, ".git", STATE_DIR, "node_modules")

_FIND_HIP = re.compile(r"find_package\s*\(\s*hip\b([^)]*)\)", re.IGNORECASE)
_CMAKE_MIN = re.compile(r"cmake_minimum_required\s*\(\s*VERSION\s+([0-9]+(?:\.[0-9]+)*)", re.IGNORECASE)
_LLVM_REMOTE = re.compile(r"LLVM_REMOTE:-([^}\s\"']+)")
# `pip install ...`, and `"$PYTHON_EXECUTABLE" -m pip install ...` (upstream's newer build_llvm.sh)
_PIP_INSTALL = re.compile(r"^\s*(?:pip3?|\S*(?i:python)\S*\s+-m\s+pip3?)\s+install\s+([^\n#]*)$", re.MULTILINE)
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

# nanobind 3 breaks MLIR's configure and build_llvm.sh's unguarded pip install takes the newest: the build tools
# and every pip install of the build are held to the pin's own bounds, these where it says nothing.
NANOBIND_DEFAULT = (">=2.9", "<3")
REQUIREMENTS_FILE = re.compile(r"(?:(?:python|scripts)/)?requirements[A-Za-z0-9_.-]*\.txt")
_LOWER = (">=", ">", "==", "~=", "===")
UPPER_OPERATORS = ("<", "<=", "==", "~=", "===")  # a specifier with one of these bounds a version
_NANOBIND_QUOTED = re.compile(r"""["']nanobind\s*((?:[<>=!~]=?|===)[^"';]*)""")
_NANOBIND_LINE = re.compile(r"^\s*nanobind\s*((?:[<>=!~]=?|===)[^#;\n]*)", re.MULTILINE | re.IGNORECASE)
_NANOBIND_FIND = re.compile(r"find_package\s*\(\s*nanobind\s+([0-9]+(?:\.[0-9]+)*)([^)]*)\)", re.IGNORECASE)
_NANOBIND_WORD = re.compile(r"nanobind\s*((?:[<>=!~]=?|===).*)", re.IGNORECASE)


def nanobind_specifiers(files: Mapping[str, str], cmake_files: Mapping[str, str],
                        pip_words: Iterable[str]) -> Tuple[str, ...]:
    """Every nanobind specifier the pin's build files name, normalised, in order, without repeats."""
    texts = _NANOBIND_QUOTED.findall(files.get("pyproject.toml", ""))
    for path, text in sorted(files.items()):
        if REQUIREMENTS_FILE.fullmatch(path):
            texts += _NANOBIND_LINE.findall(text)
    for path in sorted(cmake_files):
        for version, rest in _NANOBIND_FIND.findall(cmake_files[path]):
            texts.append(("==" if "EXACT" in rest.upper().split() else ">=") + version)
    texts += [m.group(1) for word in pip_words if (m := _NANOBIND_WORD.fullmatch(word.strip("\"'")))]
    found: List[str] = []
    for part in (part.strip() for text in texts for part in text.split(",")):
        try:
            specifier = str(Specifier(part))
        except InvalidSpecifier:
            continue
        if specifier not in found:
            found.append(specifier)
    return tuple(found)


def _version(specifier: Specifier) -> Version:
    try:
        return Version(specifier.version.rstrip(".*"))
    except InvalidVersion:
        return Version("0")


def nanobind_requirement(pin: Iterable[str]) -> str:
    """The pin's own specifiers, with each default bound the pin neither names nor contradicts."""
    own = [Specifier(s) for s in pin]
    low, high = (Specifier(s) for s in NANOBIND_DEFAULT)
    lower = [] if any(s.operator in _LOWER or s.operator in ("<", "<=") and _version(s) <= _version(low)
                      for s in own) else [low]
    upper = [] if any(s.operator in UPPER_OPERATORS or s.operator in (">", ">=") and _version(s) >= _version(high)
                      for s in own) else [high]
    return ",".join(str(s) for s in lower + own + upper)


@dataclass(frozen=True)
class BuildNeeds:
    """What building the pin needs; ``source`` says where this was read (or that it was assumed)."""

    source: str
    read: bool  # False: the source could not be read and FlyDSL's known needs (the defaults below) were assumed
    # The defaults: FlyDSL at the default pin, as read from its source.
    hip: bool = True  # a CMake file does find_package(hip ... REQUIRED)
    hip_optional: bool = False  # find_package(hip) without REQUIRED
    hip_where: str = "lib/Runtime/ROCm/CMakeLists.txt"  # the first file asking for it
    patchelf: bool = True
    nanobind: bool = True
    cmake: bool = True  # the FlyDSL build itself runs CMake (a top-level CMakeLists.txt)
    cmake_minimum: str = MIN_CMAKE
    llvm_commit: Optional[str] = None
    llvm_remote: Optional[str] = DEFAULT_LLVM_REMOTE  # where build_llvm.sh clones llvm-project from (None: it does not)
    llvm_cmake: bool = True  # build_llvm.sh configures and builds LLVM with CMake (the heavy step)
    llvm_python_bindings: bool = True  # MLIR's Python bindings: Python.h and nanobind for the LLVM step
    llvm_pip: Tuple[str, ...] = ("nanobind", "numpy", "pybind11")  # packages build_llvm.sh pip-installs by name
    # (path, url) from .gitmodules: fetched for a source build
    submodules: Tuple[Tuple[str, str], ...] = (("thirdparty/dlpack", "https://github.com/dmlc/dlpack.git"),
                                               ("thirdparty/tvm-ffi", "https://github.com/apache/tvm-ffi.git"))
    llvm: Optional[LlvmInputs] = None  # the LLVM build's inputs (source/llvm_inputs.py); None: not read
    nanobind_spec: str = nanobind_requirement([">=2.0"])

    def summary(self) -> str:
        llvm = "an LLVM/MLIR build" + (f" of {self.llvm_commit[:12]}" if self.llvm_commit else "")
        parts = [text for text, used in (("hip", self.hip), ("patchelf", self.patchelf),
                                         (f"nanobind {self.nanobind_spec}", self.nanobind),
                                         (f"cmake >= {self.cmake_minimum}", self.cmake), (llvm, self.llvm_cmake))
                 if used]
        return ", ".join(parts) if parts else "nothing beyond the interpreter and git"


KNOWN_FLYDSL_NEEDS = BuildNeeds(source="FlyDSL's known needs (the pin's source could not be read here)", read=False)


def is_build_file(path: str) -> bool:
    """A build file of the pin's own: none under _SKIPPED_DIRS but the LLVM commit files."""
    name = os.path.basename(path)
    return path in COMMIT_FILES or path.split("/", 1)[0] not in _SKIPPED_DIRS and (
        name == "CMakeLists.txt" or name.endswith(".cmake") or path in (LLVM_SCRIPT, "pyproject.toml", GITMODULES)
        or REQUIREMENTS_FILE.fullmatch(path) is not None)


def needs_from_files(files: Mapping[str, str], source: str, inputs: Optional[LlvmInputs] = None) -> BuildNeeds:
    """Pure: the needs of the build files (path -> text); ``inputs``: the LLVM inputs when read apart."""
    if inputs is None:
        inputs = read_llvm_inputs(files, {})
    cmake_files = {p: code_lines(t) for p, t in files.items()
                   if os.path.basename(p) == "CMakeLists.txt" or p.endswith(".cmake")}
    hip = hip_optional = False
    hip_where = ""
    for path in sorted(cmake_files, key=lambda p: (p.count("/"), p)):
        for match in _FIND_HIP.finditer(cmake_files[path]):
            required = "REQUIRED" in match.group(1).upper().split()
            if required and not hip:
                hip, hip_where = True, path
            elif not required and not hip_where:
                hip_optional, hip_where = True, path
    # patchelf and nanobind are used from the CMake files (CopyFlyPythonSources, the bindings); a script
    # that only probes for them (build.sh's `python3 -c "import nanobind"`) does not make them needed.
    flydsl_text = "\n".join(cmake_files.values())
    minimums = [m for text in cmake_files.values() for m in _CMAKE_MIN.findall(text)]
    llvm = code_lines(files.get(LLVM_SCRIPT, ""))
    found_remote = _LLVM_REMOTE.search(llvm)
    remote = found_remote.group(1) if found_remote else DEFAULT_LLVM_REMOTE if "llvm-project.git" in llvm else None
    pip_words = [w.strip("\"'") for args in _PIP_INSTALL.findall(llvm) for w in args.split()]
    names = (_PACKAGE_NAME.match(word) for word in pip_words if not word.startswith("-") and "$" not in word)
    pip_packages = list(dict.fromkeys(name.group(0) for name in names if name))
    pinned = nanobind_specifiers(files, cmake_files, pip_words)
    return BuildNeeds(
        source=source,
        read=True,
        hip=hip,
        hip_optional=hip_optional and not hip,
        hip_where=hip_where,
        patchelf=re.search(r"\bpatchelf\b", flydsl_text) is not None,
        nanobind="nanobind" in flydsl_text,
        cmake="CMakeLists.txt" in files,
        cmake_minimum=max(minimums + [MIN_CMAKE], key=lambda v: tuple(int(p) for p in v.split("."))),
        llvm_commit=inputs.commit,
        llvm_remote=remote,
        llvm_cmake=re.search(r"^\s*cmake\b", llvm, re.MULTILINE) is not None,
        llvm_python_bindings="MLIR_ENABLE_BINDINGS_PYTHON=ON" in llvm,
        llvm_pip=tuple(pip_packages),
        submodules=parse_gitmodules(files.get(GITMODULES, "")),
        llvm=inputs,
        nanobind_spec=nanobind_requirement(pinned),
    )


def parse_gitmodules(text: str) -> Tuple[Tuple[str, str], ...]:
    """(path, url) of each ``[submodule]`` section that has both."""
    found = []
    for section in re.split(r"^\s*\[submodule\b[^\]]*\]\s*$", text, flags=re.MULTILINE)[1:]:
        path = re.search(r"^\s*path\s*=\s*(.+?)\s*$", section, re.MULTILINE)
        url = re.search(r"^\s*url\s*=\s*(.+?)\s*$", section, re.MULTILINE)
        if path and url:
            found.append((path.group(1), url.group(1)))
    return tuple(found)


def find_needs(root: str, repo: str, pin: str, checkout: Optional[str] = None,
               environ: Optional[Mapping[str, str]] = None, mirrors: GitMirrors = ()) -> BuildNeeds:
    """The needs read from ``checkout``, else a local repository at the pin, else FlyDSL's known needs."""
    env = os.environ if environ is None else environ
    if checkout is not None and os.path.isdir(checkout):
        return pin_needs(CheckoutFiles(checkout), env)
    for path, commit in pin_commits(root, repo, pin, mirrors):
        with contextlib.suppress(CommandFailed, OSError, ValueError):
            return pin_needs(CommitFiles(path, commit), env)
    return KNOWN_FLYDSL_NEEDS


def pin_needs(files: PinFiles, environ: Mapping[str, str]) -> BuildNeeds:
    """The needs of a checkout's or a commit's build files."""
    build_files = read_texts(files, [p for p in files.listing() if is_build_file(p)])
    return needs_from_files(build_files, files.where, pin_llvm_inputs(files, environ))


def build_tools(needs: BuildNeeds, *, llvm: bool) -> Dict[str, Optional[str]]:
    """The private toolchain's tools for this build and the specifier each must satisfy (None: any version);
    ``llvm``: the LLVM step is still to run."""
    cmake = needs.cmake or (llvm and needs.llvm_cmake)
    used = {"cmake": cmake, "ninja": cmake, "patchelf": needs.patchelf, "nanobind": needs.nanobind}
    requirements = {"cmake": f">={needs.cmake_minimum}", "nanobind": needs.nanobind_spec}
    return {name: requirements.get(name) for name, use in used.items() if use}
