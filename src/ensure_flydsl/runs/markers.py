"""The files pollers read: the env file (success, written last), its JSON twin and the failure marker; and
whether the env file answers a request (its twin's tree would pass the request's gate)."""

from __future__ import annotations

import datetime
import errno
import os
import shlex
import shutil
import socket
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Mapping, MutableMapping, Optional, Tuple

from packaging.version import InvalidVersion

from ensure_flydsl import layout
from ensure_flydsl.errors import FAILURE_CODES, Stage
from ensure_flydsl.result import LINK_MODES, How, Result, TreeIdentity
from ensure_flydsl.settings import Request, release_at_least
from ensure_flydsl.support import faults, fields, space
from ensure_flydsl.support.fields import checked
from ensure_flydsl.support.files import atomic_write, atomic_write_json, file_path_problem, read_json, remove_file
from ensure_flydsl.support.urls import same_repo
from ensure_flydsl.version import __version__
from ensure_flydsl.warm import without_folders


@dataclass(frozen=True)
class EnvFile:
    """What the env file exports; its text, its variables and what ``activate()`` applies are made from it."""

    root: str
    prepend: Tuple[str, ...]  # the tree's folders, first on PYTHONPATH
    shim_dir: Optional[str] = None
    vllm_moe: bool = False

    @classmethod
    def of_result(cls, result: Result) -> "EnvFile":
        return cls(result.root, tuple(result.prepend), result.env.get("FLYDSL_SHIM_DIR"),
                   result.env.get("VLLM_USE_FLYDSL_MOE") == "1")

    def mapping(self, caller_pythonpath: Optional[str]) -> Dict[str, str]:
        """The variables as sourcing the file sets them: the tree's folders first, once, then the caller's."""
        rest = without_folders(caller_pythonpath, list(self.prepend))
        env = {"FLYDSL_ROOT": self.root, "PYTHONPATH": os.pathsep.join([*self.prepend, *([rest] if rest else [])]),
               "FLY_BUILD": layout.BUILD_DIR,  # GEAK's shim finds the tree's flydsl in FLYDSL_ROOT/$FLY_BUILD
               **self.kept_if_set()}
        return {name: value for name, value in env.items() if value is not None}

    def kept_if_set(self) -> Dict[str, Optional[str]]:
        """What the caller set wins: GEAK points FLYDSL_SHIM_DIR at a tuned overlay and sets VLLM_USE_FLYDSL_MOE=0
        for its A/B baselines (None: not exported)."""
        return {"FLYDSL_SHIM_DIR": self.shim_dir, "VLLM_USE_FLYDSL_MOE": "1" if self.vllm_moe else None}

    def apply(self, environ: MutableMapping[str, str], path: List[str]) -> None:
        """Set the variables in ``environ`` as sourcing the file does (a caller's own shim folder and vLLM switch
        stay) and put the tree's folders first on ``path`` (``sys.path``)."""
        environ.update({k: v for k, v in self.mapping(environ.get("PYTHONPATH")).items()
                        if not (k in self.kept_if_set() and environ.get(k))})
        path[:] = [*self.prepend, *(entry for entry in path if entry not in self.prepend)]

    def text(self) -> str:
        """POSIX sh, every value single-quoted: sourcing it never runs code that came from a path.  Sourcing it
        twice changes nothing: the folders are taken out of the caller's PYTHONPATH before they are put first."""
        quoted_path = ":".join(shlex.quote(p) for p in self.prepend) if self.prepend else "''"
        lines = [
            "# flydsl_env.sh: written by ensure-flydsl " + __version__ + ". Source it: . ./flydsl_env.sh",
            "# Every value is quoted literally; the caller's PYTHONPATH is kept after the tree's folders.",
            f"export FLYDSL_ROOT={shlex.quote(self.root)}",
        ]
        folders = [p for p in self.prepend if p]
        if folders:
            lines += [
                '_ensure_flydsl_pp=":${PYTHONPATH:-}:"',
                f"for _ensure_flydsl_d in {' '.join(shlex.quote(p) for p in folders)}; do",
                '  while :; do case "$_ensure_flydsl_pp" in',
                '    *":$_ensure_flydsl_d:"*) _ensure_flydsl_pp=${_ensure_flydsl_pp%%":$_ensure_flydsl_d:"*}'
                ':${_ensure_flydsl_pp#*":$_ensure_flydsl_d:"} ;;',
                "    *) break ;;",
                "  esac; done",
                "done",
                "_ensure_flydsl_pp=${_ensure_flydsl_pp#:}",
                "_ensure_flydsl_pp=${_ensure_flydsl_pp%:}",
                f'export PYTHONPATH={quoted_path}"${{_ensure_flydsl_pp:+:$_ensure_flydsl_pp}}"',
                "unset _ensure_flydsl_pp _ensure_flydsl_d",
            ]
        else:  # no folder first (a tree on the interpreter's path): ":$PYTHONPATH" would put the working folder on it
            rest = "${PYTHONPATH:+:${PYTHONPATH}}" if self.prepend else "${PYTHONPATH:-}"
            lines.append(f'export PYTHONPATH={quoted_path}"{rest}"')
        lines.append(f"export FLY_BUILD={layout.BUILD_DIR}")
        for name, value in self.kept_if_set().items():
            if value is not None:
                lines += [f'[ -n "${{{name}:-}}" ] || {name}={shlex.quote(value)}', f"export {name}"]
        return "\n".join(lines) + "\n"


def _conflicts(value: object) -> Optional[List[Dict[str, Optional[str]]]]:
    """Other FlyDSL users the tree breaks (probe/interpreter.py: broken_users), as the twin records them."""
    keys = {"module", "error", "floor"}
    if not isinstance(value, list) or not all(isinstance(c, dict) and set(c) == keys and isinstance(c["module"], str)
                                              and isinstance(c["error"], str) and fields.text(c["floor"]) == c["floor"]
                                              for c in value):
        return None
    return [dict(c) for c in value]


@dataclass(frozen=True)
class EnvTwin(TreeIdentity, fields.Record):
    """``flydsl_env.json``: what the env file exports, the request it answers, the tree and interpreter it was
    made for.  And the warm path's fingerprint, with the folders and site dirs it watches."""

    how: How = checked(fields.member(How))
    tree: str = checked(fields.path)
    version: str = checked(fields.text)
    python: str = checked(fields.absolute_path)
    python_version: str = checked(fields.text)
    abi: str = checked(fields.text)
    commit: Optional[str] = checked(fields.object_name, nullable=True)
    files: Dict[str, str] = checked(fields.text_map)
    request: Request = checked(Request.from_json)
    watch: List[str] = checked(fields.paths)
    site_dirs: List[str] = checked(fields.paths)
    fingerprint: Dict[str, object] = checked(fields.mapping)
    FLYDSL_ROOT: str = checked(lambda v: v if v == "" else fields.absolute_path(v), "")  # "": an older tool's
    pythonpath_prepend: List[str] = checked(fields.paths, factory=list)
    FLYDSL_SHIM_DIR: Optional[str] = checked(fields.path, None)
    VLLM_USE_FLYDSL_MOE: Optional[str] = checked(fields.path, None)
    written_at: str = checked(fields.text, "")
    tool_version: str = checked(fields.text, "")
    # Later versions' fields, where a wrong type reads as not recorded.  The pin and repo the root's tree was
    # built (or installed) from, None for a tree found elsewhere: what --exact-pin compares.
    pin: Optional[str] = checked(fields.text, None, lenient=True)
    repo: Optional[str] = checked(fields.text, None, lenient=True)
    run_id: str = checked(fields.text, "", lenient=True)
    built: bool = checked(fields.boolean, False, lenient=True)
    elapsed_s: Optional[float] = checked(fields.seconds, None, lenient=True)
    link_mode: Optional[str] = checked(lambda v: fields.one_of(v, LINK_MODES), None, lenient=True)
    conflicts: List[Dict[str, Optional[str]]] = checked(_conflicts, factory=list, lenient=True)
    mlir: Optional[str] = checked(fields.text, None, lenient=True)  # where a source build's MLIR came from

    # What records when and by what it was written; the rest says which tree answers which request.
    RECORD_FIELDS = ("written_at", "tool_version", "run_id", "built", "elapsed_s", "link_mode", "mlir")

    @property
    def exports(self) -> EnvFile:
        return EnvFile(self.FLYDSL_ROOT, tuple(self.pythonpath_prepend), self.FLYDSL_SHIM_DIR,
                       self.VLLM_USE_FLYDSL_MOE == "1")

    @classmethod
    def from_json(cls, data: object) -> Optional["EnvTwin"]:
        """The twin, or None.  A tree the tool made is its own, with absolute folders; a reused one is named as
        the probe found it (a caller's relative PYTHONPATH entry stays relative)."""
        twin = fields.from_json(cls, data)
        if twin is None or twin.how == How.REUSED:
            return twin
        absolute = twin.tree.startswith("/") and all(p.startswith("/") for p in twin.pythonpath_prepend)
        return twin if absolute else None

    def answers(self, other: "EnvTwin") -> bool:
        return replace(other, **{k: getattr(self, k) for k in self.RECORD_FIELDS}) == self


def publish_env_file(env_file: str, env_json: str, twin: EnvTwin, *, after_twin: Callable[[EnvTwin], None]) -> None:
    """Write the JSON twin, then (``after_twin``) the front door's stamp, then the env file: success comes last."""
    os.makedirs(os.path.dirname(env_file), exist_ok=True)
    written = replace(twin, written_at=now_iso(), tool_version=__version__)
    atomic_write_json(env_json, written.to_json())
    faults.point("twin-written")
    after_twin(written)
    atomic_write(env_file, twin.exports.text().encode())
    faults.point("published")


def withdraw_env_file(env_file: str, env_json: str) -> bool:
    """Take a success marker away (the sh file first: it is the signal), and the front door's stamp."""
    removed = remove_file(env_file)
    remove_file(layout.warm_stamp(os.path.dirname(env_file)))
    return remove_file(env_json) or removed


def read_env_json(env_json: str) -> Optional[EnvTwin]:
    return EnvTwin.from_json(read_json(env_json))


# -- whether the env file answers a request ------------------------------------------------------------------
def _same_interpreter(twin: EnvTwin, python: str, path_env: Optional[str]) -> bool:
    if twin.request.python == python or twin.python == python:
        return True
    found = python if os.sep in python else shutil.which(python, path=path_env)
    return found is not None and os.path.abspath(found) == os.path.abspath(twin.python)


def built_from(twin: EnvTwin) -> str:
    if twin.pin:
        return f"pin {twin.pin}" + (f" (commit {twin.commit[:12]})" if twin.commit and twin.commit != twin.pin else "")
    if twin.commit:
        return f"commit {twin.commit[:12]}"
    return "no pin of this tool's (a tree found elsewhere)"


def twin_gap(twin: EnvTwin, request: Request, path_env: Optional[str]) -> Optional[str]:
    """None when the env file whose twin is ``twin`` answers ``request``; else why not, as a clause."""
    if twin.request == request:
        return None  # written for this very request, which its tree passed
    if twin.FLYDSL_ROOT and twin.FLYDSL_ROOT != request.root:
        return f"it was written for the root {twin.FLYDSL_ROOT}"
    python = request.python
    if not _same_interpreter(twin, python, path_env):
        return f"it was made for the interpreter {twin.python}, not {python}"
    missing = [m for m in request.require if m not in twin.files]
    if missing:
        return f"its tree was not checked for {', '.join(missing)}"
    floor = request.min_version
    try:
        passes = release_at_least(twin.version, floor)
    except InvalidVersion:
        passes = False
    if not passes:
        return f"it holds flydsl {twin.version}, below the floor {floor} (FLYDSL_MIN_VERSION)"
    if request.exact_pin:
        pin, repo = request.pin, request.repo
        same_pin = twin.pin == pin or (bool(twin.commit) and twin.commit == pin.lower())
        if not (same_pin and twin.repo and same_repo(twin.repo, repo)):
            return f"its tree was built from {built_from(twin)}, not from the pin {pin} (FLYDSL_EXACT_PIN)"
    shim = request.shim_dir
    if twin.FLYDSL_SHIM_DIR != shim:
        return f"it exports FLYDSL_SHIM_DIR={twin.FLYDSL_SHIM_DIR!r}, not {shim!r}"
    if (twin.VLLM_USE_FLYDSL_MOE == "1") != request.vllm_moe:
        said = "exports" if twin.VLLM_USE_FLYDSL_MOE == "1" else "does not export"
        return f"it {said} VLLM_USE_FLYDSL_MOE=1 (FLYDSL_VLLM_MOE)"
    return None


def installed_twin(root: str) -> Optional[EnvTwin]:
    """The twin of the root's env file, whatever request it answers, when the env file is there."""
    twin = read_env_json(layout.env_json(root))
    return twin if twin is not None and os.path.isfile(layout.env_file(root)) else None


def installed(root: str, request: Request, path_env: Optional[str]) -> Optional[Dict[str, object]]:
    """The result objects' ``installed``: what the root's env file holds now, and whether it answers ``request``."""
    twin = installed_twin(root)
    if twin is None:
        return None
    gap = twin_gap(twin, request, path_env)
    return {"version": twin.version, "how": twin.how, "python": twin.python, "commit": twin.commit,
            "pin": twin.pin, "env_file": layout.env_file(root), "answers": gap is None, "why_not": gap}


def installed_line(found: Mapping[str, object]) -> str:
    how = f" ({found['how']})" if found.get("how") else ""
    what = f"flydsl {found['version']}{how} for {found['python']}"
    if found.get("answers"):
        return f"{found['env_file']} answers this request: {what}"
    return (f"the root still holds {what}: {found['env_file']} keeps working for what it was made for, but not "
            f"for this request ({found['why_not']})")


# -- the failure marker ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Failure(fields.Record):
    """How a run failed (a run record's, a failure marker's)."""

    stage: Optional[Stage] = checked(fields.text, nullable=True, convert=Stage.parse)  # None: a stage not known
    # Never 0 or 75, which `wait` would pass on as success or "still running".
    exit_code: int = checked(lambda v: v if fields.integer(v) in FAILURE_CODES else None)
    reason: str = checked(fields.text, "")
    hint: str = checked(fields.text, "", lenient=True)


@dataclass(frozen=True)
class FailureMarker:
    """The failure marker as it reads back (None, or empty, where a part is not one a run writes)."""

    failure: Optional[Failure]
    request: Optional[Request] = checked(Request.from_json, None, lenient=True)  # None also for bad input's ``{}``
    run_id: Optional[str] = checked(fields.text, None, lenient=True, convert=lambda found: found or None)
    log: str = checked(fields.text, "", lenient=True)
    log_tail: Tuple[str, ...] = checked(lambda v: tuple(map(str, v)) if isinstance(v, list) else None, (),
                                        lenient=True)
    unnamed: bool = False  # it holds no request object at all (an older tool's marker)

    @classmethod
    def from_json(cls, data: Optional[Mapping[str, object]]) -> Optional["FailureMarker"]:
        if data is None:
            return None
        unnamed = not isinstance(data.get("request"), dict)
        return fields.read(cls, data, failure=Failure.from_json(data), unnamed=unnamed)

    def names(self, root: str) -> bool:
        """Whether it was written for ``root``: one without a request object is the root's own; one whose request
        is not a request (bad input's ``{}``) names no root, and no run takes it away."""
        return self.unnamed if self.request is None else self.request.root == root


def read_failure_marker(path: str) -> Optional[FailureMarker]:
    return FailureMarker.from_json(read_json(path))


def withdraw_failure_marker(path: str, root: str) -> bool:
    """Take away the failure marker if it was written for ``root``: sibling roots share the default path."""
    marker = read_failure_marker(path) if os.path.isfile(path) else None
    return marker is not None and marker.names(root) and remove_file(path)


def write_failure_marker(path: str, *, stage: Optional[Stage], exit_code: int, reason: str, hint: str,
                         log: Optional[str], log_tail: List[str], run_id: str, request: Optional[Request]) -> None:
    """The failure marker; ``request`` None for bad input (no request was read): written as ``{}``."""
    if file_path_problem(path, symlink_ok=True) is not None:  # renamed into place: a symlink is fine
        return  # refused as bad input (exit 64); never replace a device or a folder
    atomic_write_json(path, {
        "stage": stage, "exit_code": exit_code, "reason": reason, "hint": hint, "log": log, "log_tail": log_tail,
        "run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(), "time": now_iso(),
        "request": request.to_json() if request is not None else {},
    })


def marker_unwritten(path: str, problem: OSError) -> str:
    why = problem.strerror or str(problem)
    if space.is_full(problem):
        why = "the disk quota is used up there" if problem.errno == errno.EDQUOT else "no space left on its file system"
    return f"the failure marker {path} could not be written ({why}): a poller of it does not see this failure"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def tail_of(path: str) -> List[str]:
    """The last lines of a log, read from its end (logs grow large)."""
    if not path:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return handle.read().decode(errors="replace").splitlines()[-20:]
    except OSError:
        return []
