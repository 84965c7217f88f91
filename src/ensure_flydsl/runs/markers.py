"""The files pollers read: the env file (success), its JSON twin, and the failure marker.

Every value in the env file is shell-quoted, so sourcing it can never run code that came from a path
(the bash executor, ensure_flydsl.sh, wrote ``export FLYDSL_ROOT=$FR`` unquoted).  Each file is written
atomically (temp file + rename) and the env file last: its existence is the success signal.
"""

from __future__ import annotations

import datetime
import errno
import os
import shlex
import socket
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import FAILURE_CODES, Stage
from ensure_flydsl.layout import warm_stamp
from ensure_flydsl.result import LINK_MODES, How, TreeIdentity
from ensure_flydsl.settings_table import Request
from ensure_flydsl.support import faults, fields, space
from ensure_flydsl.support.files import atomic_write, atomic_write_json, file_path_problem, read_json, remove_file
from ensure_flydsl.version import __version__
from ensure_flydsl.warm import without_folders


def env_mapping(
    root: str, prepend: Sequence[str], caller_pythonpath: Optional[str], shim_dir: Optional[str], vllm_moe: bool
) -> Dict[str, str]:
    """The variables the env file exports, with PYTHONPATH as it will be after sourcing it now (the tree's
    folders first, once: sourcing it again, or a caller that already has them, changes nothing)."""
    rest = without_folders(caller_pythonpath, list(prepend))
    parts = list(prepend) + ([rest] if rest else [])
    env = {"FLYDSL_ROOT": root, "PYTHONPATH": os.pathsep.join(parts)}
    if shim_dir is not None:
        env["FLYDSL_SHIM_DIR"] = shim_dir
    if vllm_moe:
        env["VLLM_USE_FLYDSL_MOE"] = "1"
    return env


def render_env_sh(root: str, prepend: Sequence[str], shim_dir: Optional[str], vllm_moe: bool) -> str:
    """The env file's text: POSIX sh, every value single-quoted, the caller's PYTHONPATH kept at the end.

    No path ever appears outside quotes, not even in a comment (a newline would end the comment).  Sourcing
    it twice changes nothing: the tree's folders are taken out of the caller's PYTHONPATH before they are
    put first (``case`` and ``${var%%pattern}`` with the folder quoted, so it is matched literally).
    """
    quoted_path = ":".join(shlex.quote(p) for p in prepend) if prepend else "''"
    lines = [
        "# flydsl_env.sh: written by ensure-flydsl " + __version__ + ". Source it: . ./flydsl_env.sh",
        "# Every value is quoted literally; the caller's PYTHONPATH is kept after the tree's folders.",
        f"export FLYDSL_ROOT={shlex.quote(root)}",
    ]
    folders = [p for p in prepend if p]
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
    else:
        lines.append(f'export PYTHONPATH={quoted_path}"${{PYTHONPATH:+:${{PYTHONPATH}}}}"')
    if shim_dir is not None:
        lines.append(f"export FLYDSL_SHIM_DIR={shlex.quote(shim_dir)}")
    if vllm_moe:
        lines.append("export VLLM_USE_FLYDSL_MOE=1")
    return "\n".join(lines) + "\n"


_HOWS = {how.value for how in How}


@dataclass(frozen=True)
class EnvTwin(TreeIdentity):
    """``flydsl_env.json``: what the env file exports, the request it answers, the tree and interpreter it
    was made for (:class:`TreeIdentity`, as the result says it), and the warm path's fingerprint with the
    folders and site dirs it watches."""

    request: Request
    watch: List[str]
    site_dirs: List[str]
    fingerprint: Dict[str, object]
    FLYDSL_ROOT: str = ""
    pythonpath_prepend: List[str] = field(default_factory=list)
    FLYDSL_SHIM_DIR: Optional[str] = None
    VLLM_USE_FLYDSL_MOE: Optional[str] = None
    written_at: str = ""
    tool_version: str = ""
    # The pin and repository the root's tree was built (or installed) from, None for a tree found elsewhere:
    # what --exact-pin compares; the request above may be a later one that reused the tree.
    pin: Optional[str] = None
    repo: Optional[str] = None
    # The run that wrote the file, whether it built or installed the tree, and how long it took.
    run_id: str = ""
    built: bool = False
    elapsed_s: Optional[float] = None
    # How the host store gave the root its tree (result.LINK_MODES), as that run's result said: a warm answer
    # says it too.
    link_mode: Optional[str] = None

    # What says which tree answers which request; the rest records when and by what it was written.
    ANSWER_FIELDS = ("request", "how", "tree", "version", "python", "python_version", "abi", "commit", "files",
                     "watch", "site_dirs", "fingerprint", "FLYDSL_ROOT", "pythonpath_prepend", "FLYDSL_SHIM_DIR",
                     "VLLM_USE_FLYDSL_MOE", "pin", "repo")

    def to_json(self) -> Dict[str, object]:
        data = asdict(self)
        data["request"] = self.request.to_json()
        return data

    @classmethod
    def from_json(cls, data: object) -> Optional["EnvTwin"]:
        """The twin, or None for a file that is not one (torn, foreign, an older tool's), field by field, and
        for what the values mean: ``how`` one of :class:`How`, the interpreter and the root absolute paths
        (``python`` is the probe's ``sys.executable``; a relative one would be the caller's folder's), and a
        tree the tool made (not reused) the root's own, with absolute import folders; ``commit`` a git object
        name (``--exact-pin`` compares it with the pin); the request one a run writes (:class:`Request`)."""
        if not isinstance(data, dict):
            return None
        request = Request.from_json(data.get("request"))
        if request is None:
            return None
        how = fields.one_of(data.get("how"), _HOWS)
        # A reused tree is named as the probe found it (a caller's relative PYTHONPATH entry stays relative).
        tree_path = fields.path if how in (None, How.REUSED.value) else fields.absolute_path
        tree_paths = fields.paths if how in (None, How.REUSED.value) else fields.absolute_paths
        root = data.get("FLYDSL_ROOT", "")  # an absolute path, or "" in an older tool's twin (it did not record it)
        required = {
            "how": How(how) if how is not None else None,
            "tree": tree_path(data.get("tree")),
            "version": fields.text(data.get("version")),
            "python": fields.absolute_path(data.get("python")),
            "python_version": fields.text(data.get("python_version")),
            "abi": fields.text(data.get("abi")),
            "files": fields.text_map(data.get("files")),
            "watch": fields.paths(data.get("watch")),
            "site_dirs": fields.paths(data.get("site_dirs")),
            "fingerprint": data.get("fingerprint") if isinstance(data.get("fingerprint"), dict) else None,
            "FLYDSL_ROOT": root if root == "" else fields.absolute_path(root),
            "pythonpath_prepend": tree_paths(data.get("pythonpath_prepend", [])),
            "written_at": fields.text(data.get("written_at", "")),
            "tool_version": fields.text(data.get("tool_version", "")),
        }
        if any(value is None for value in required.values()):
            return None
        optional = {name: data.get(name) for name in ("commit", "FLYDSL_SHIM_DIR", "VLLM_USE_FLYDSL_MOE")}
        if any(value is not None and fields.path(value) is None for value in optional.values()):
            return None
        if optional["commit"] is not None and fields.object_name(optional["commit"]) is None:
            return None
        # The fields later versions added: a wrong type reads as not recorded.
        later = {
            "pin": fields.text(data.get("pin")),
            "repo": fields.text(data.get("repo")),
            "run_id": fields.text(data.get("run_id")) or "",
            "built": data.get("built") is True,
            "elapsed_s": fields.seconds(data.get("elapsed_s")),
            "link_mode": fields.one_of(data.get("link_mode"), LINK_MODES),
        }
        return cls(request=request, **required, **optional, **later)  # type: ignore[arg-type]

    def answers(self, other: "EnvTwin") -> bool:
        return all(getattr(self, k) == getattr(other, k) for k in self.ANSWER_FIELDS)


def publish_env_file(env_file: str, env_json: str, twin: EnvTwin, *, shim_dir: Optional[str], vllm_moe: bool,
                     after_twin: Callable[[EnvTwin], None]) -> None:
    """Write the JSON twin, then (``after_twin``) the front door's stamp, then the env file: the success signal
    comes last."""

    os.makedirs(os.path.dirname(env_file), exist_ok=True)
    written = replace(twin, written_at=now_iso(), tool_version=__version__)
    atomic_write_json(env_json, written.to_json())
    faults.point("twin-written")
    after_twin(written)
    atomic_write(env_file, render_env_sh(twin.FLYDSL_ROOT, twin.pythonpath_prepend, shim_dir, vllm_moe).encode())
    faults.point("published")


def withdraw_env_file(env_file: str, env_json: str) -> bool:
    """Take a success marker out of the way (the sh file first: it is the signal), and the front door's stamp."""
    removed = remove_file(env_file)
    remove_file(warm_stamp(os.path.dirname(env_file)))
    return remove_file(env_json) or removed


def read_env_json(env_json: str) -> Optional[EnvTwin]:
    return EnvTwin.from_json(read_json(env_json))


def marker_path_problem(path: str) -> Optional[str]:
    """Why the failure marker cannot go to ``path`` (it is renamed into place: a symlink is fine)."""
    return file_path_problem(path, symlink_ok=True)


@dataclass(frozen=True)
class Failure:
    """How a run failed: the stage, its exit code, the one-line reason (a run record's, a failure marker's)."""

    stage: Optional[Stage]  # None also for a stage this version does not know
    exit_code: int
    reason: str
    hint: str = ""  # what to do next

    def to_json(self) -> Dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Optional["Failure"]:
        """The failure (of a run record, or a failure marker), or None when it is not one: the exit code one
        a failed run records (errors.FAILURE_CODES: never 0 or 75, which `wait` would pass on as success or
        "still running"), the stage a string or null (a name this version does not know reads as null), the
        reason a string."""

        if not isinstance(data, dict):
            return None
        code, stage, reason = fields.integer(data.get("exit_code")), data.get("stage"), data.get("reason", "")
        if code not in FAILURE_CODES or not isinstance(reason, str):
            return None
        if stage is not None and not isinstance(stage, str):
            return None
        hint = data.get("hint")
        return cls(Stage.parse(stage), code, reason, hint if isinstance(hint, str) else "")


@dataclass(frozen=True)
class FailureMarker:
    """The failure marker as it reads back (``write_failure_marker`` writes it), field by field: the failure
    (None when that part is not one a run writes), the request it was written for (None when it names none:
    bad input's marker, whose settings were not read, records ``{}``; or when it is not a :class:`Request`),
    whether it holds no request object at all (``unnamed``, as an older tool's marker), the run, the log and
    the log's last lines."""

    failure: Optional[Failure]
    request: Optional[Request]
    run_id: Optional[str]
    log: str
    log_tail: Tuple[str, ...]
    unnamed: bool = False

    @classmethod
    def from_json(cls, data: Optional[Mapping[str, object]]) -> Optional["FailureMarker"]:
        if data is None:
            return None
        request, tail = data.get("request"), data.get("log_tail")
        return cls(
            failure=Failure.from_json(data), request=Request.from_json(request),
            run_id=fields.text(data.get("run_id")) or None, log=fields.text(data.get("log")) or "",
            log_tail=tuple(str(line) for line in tail) if isinstance(tail, list) else (),
            unnamed=not isinstance(request, dict),
        )

    def names(self, root: str) -> bool:
        """Whether it was written for ``root``.  One without a request object cannot say otherwise: it is
        taken as the root's own; one whose request is not a request (bad input's ``{}``, a garbled one) names
        no root, and no run takes it away."""
        if self.request is None:
            return self.unnamed
        return self.request.root == root


def read_failure_marker(path: str) -> Optional[FailureMarker]:
    """The failure marker at ``path``, or None when there is none (or it is not a JSON object)."""
    return FailureMarker.from_json(read_json(path))


def withdraw_failure_marker(path: str, root: str) -> bool:
    """Take away the failure marker if it was written for ``root``: sibling roots in one folder share the
    default marker path, and a sibling's poller must still see its own failure."""
    marker = read_failure_marker(path) if os.path.isfile(path) else None
    if marker is None or not marker.names(root):
        return False
    return remove_file(path)


def write_failure_marker(
    path: str,
    *,
    stage: Optional[Stage],
    exit_code: int,
    reason: str,
    hint: str,
    log: Optional[str],
    log_tail: List[str],
    run_id: str,
    request: Optional[Request],
) -> None:
    """The failure marker; ``request`` None for bad input (no request was read): written as ``{}``."""
    if marker_path_problem(path) is not None:
        return  # refused as bad input (exit 64); never replace a device or a folder
    atomic_write_json(
        path,
        {
            "stage": stage,
            "exit_code": exit_code,
            "reason": reason,
            "hint": hint,
            "log": log,
            "log_tail": log_tail,
            "run_id": run_id,
            "pid": os.getpid(),
            "host": _hostname(),
            "time": now_iso(),
            "request": request.to_json() if request is not None else {},
        },
    )


def marker_unwritten(path: str, problem: OSError) -> str:
    """What a failure's one line adds when its marker could not be written: whoever polls for it waits on."""

    why = problem.strerror or str(problem)
    if space.is_full(problem):
        why = "the disk quota is used up there" if problem.errno == errno.EDQUOT else "no space left on its file system"
    return f"the failure marker {path} could not be written ({why}): a poller of it does not see this failure"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _hostname() -> str:
    return socket.gethostname()


def tail_of(path: str, count: int = 20) -> List[str]:
    """The last lines of a log, for a failure marker (read from its end: logs grow large)."""
    if not path:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return handle.read().decode(errors="replace").splitlines()[-count:]
    except OSError:
        return []
