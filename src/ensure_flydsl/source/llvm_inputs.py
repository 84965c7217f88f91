"""The inputs of a pin's LLVM/MLIR build, read from its files: the commit, sha256 of build_llvm.sh and the thirdparty/
files it names, the overridable variables that change what is built; an unknown commit gets no key."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Tuple, Union

from ensure_flydsl.source.git import PinFiles

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
        """The MLIR key, or None when the commit is unknown; ``minimal=False``: of the build with every target,
        which serves too.  ``files`` and ``environment`` appear only when non-empty: a pin of the v0.2.2 shape
        keeps the key MLIR was built or cached under before."""
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
