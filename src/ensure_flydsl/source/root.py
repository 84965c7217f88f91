"""What the tool knows about a root (``ROOT/.ensure_flydsl/``): whether it made it, which steps finished.

- ``owner.json``: written when the tool creates or adopts the root; without it the root is not ours.
- ``stamps/<step>.json``: written when a step finishes, with the key of its inputs (commit, interpreter
  ABI, build settings); removed before the step starts again, as uv's ``.ok`` file.
- ``stamps/<step>.started.json``: the key a step that creates files began with: what it leaves behind
  was made by this tool, and for which inputs.
- ``stamps/tree.json``: the finished tree, written after verification and before the env file.
"""

from __future__ import annotations

import enum
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from ensure_flydsl.layout import (
    BUILD_DIR,
    ENV_FILE_NAME,
    ENV_JSON_NAME,
    STAMP_SUFFIX,
    STATE_DIR,
    owner_file,
    stamp_file,
    stamps_dir,
    state_dir,
)
from ensure_flydsl.result import How
from ensure_flydsl.settings import same_repo
from ensure_flydsl.source.git import read_git
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write_json, read_json, remove_file, remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed

# Files a root may hold that are ours by contract (the bash executor wrote them too), not somebody's work.
CONTRACT_FILES = (ENV_FILE_NAME, ENV_JSON_NAME)
# Untracked paths in a checkout that are build outputs or ours, not local changes.
BUILD_OUTPUTS = (STATE_DIR + "/", BUILD_DIR + "/", ENV_FILE_NAME, ENV_JSON_NAME)


def is_build_output(path: str) -> bool:
    """Whether a path in a checkout (as git status spells it) is a build output or the tool's own."""
    return any(path.rstrip("/") == o.rstrip("/") or path.startswith(o) for o in BUILD_OUTPUTS)


def is_ours(root: str) -> bool:
    return os.path.isfile(owner_file(root))


@dataclass(frozen=True)
class Owner:
    """``ROOT/.ensure_flydsl/owner.json``: the tool made the root, or adopted another tool's clean checkout."""

    created_root: bool
    adopted: bool
    time: float = 0.0
    tool: str = "ensure-flydsl"

    def to_json(self) -> Dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Optional["Owner"]:
        """The record, or None for one that is not a JSON object; a field of the wrong type reads as its default."""
        if not isinstance(data, dict):
            return None
        when = fields.number(data.get("time")) or 0.0
        return cls(data.get("created_root") is True, data.get("adopted") is True, when)


def owner(root: str) -> Optional[Owner]:
    return Owner.from_json(read_json(owner_file(root)))


class RootKind(str, enum.Enum):
    """What the root is to the tool."""

    ABSENT = "absent"  # nothing there: created and claimed
    EMPTY = "empty"  # an empty folder: claimed
    OURS = "ours"  # the tool made or claimed it
    CONTRACT_ONLY = "contract-only"  # only env files (the contract's): claimed
    ADOPTABLE = "adoptable"  # a clean checkout another tool made: claimed when the build starts
    FOREIGN = "foreign"  # somebody else's: refused

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class RootState:
    kind: RootKind
    reason: str = ""


def creatable_problem(folder: str) -> Optional[Tuple[str, str]]:
    """Why this user can neither use nor create ``folder``, as (what is allowed, what is wrong), or None."""
    anchor = folder
    while not os.path.lexists(anchor) and os.path.dirname(anchor) != anchor:
        anchor = os.path.dirname(anchor)
    if not os.path.isdir(anchor):
        return "a path whose folders can be created", f"{anchor} is a file, so nothing can be created under it"
    if not os.access(anchor, os.W_OK | os.X_OK):
        return "a path this user can create", f"{anchor} is not writable"
    return None


def classify_root(root: str, repo: str) -> RootState:
    """Decide, without changing anything, whether the tool may build into ``root``."""
    if not os.path.lexists(root):
        return RootState(RootKind.ABSENT)
    if os.path.islink(root) and not os.path.isdir(root):
        return RootState(RootKind.FOREIGN, "it is a dangling symbolic link")
    if not os.path.isdir(root):
        return RootState(RootKind.FOREIGN, "it exists and is not a folder")
    # Listed before the owner is looked for: a concurrent claim renames the state folder in with its owner
    # inside.  The other order saw no owner, then the claimed folder: exit 64 under 16 callers.
    entries = os.listdir(root)
    if is_ours(root):
        return RootState(RootKind.OURS)
    if not entries:
        return RootState(RootKind.EMPTY)
    if all(e in CONTRACT_FILES for e in entries):
        return RootState(RootKind.CONTRACT_ONLY)
    if ".git" not in entries:
        shown = ", ".join(sorted(entries)[:3]) + (", ..." if len(entries) > 3 else "")
        return RootState(RootKind.FOREIGN,
                         f"it holds other files ({shown}) and is not a checkout made by ensure-flydsl")
    return _classify_checkout(root, repo)


def _classify_checkout(root: str, repo: str) -> RootState:
    """A checkout the tool did not make may be adopted: same origin, no local changes."""
    try:
        origin = read_git(root, "config", "--get", "remote.origin.url").decode(errors="replace").strip()
    except CommandFailed:
        return RootState(RootKind.FOREIGN, "it is a git checkout without an origin, not one made by ensure-flydsl")
    if not same_repo(origin, repo):
        return RootState(RootKind.FOREIGN, f"it is a checkout of {origin}, not of the configured repository {repo}")
    try:
        status = read_git(root, "status", "--porcelain=v1", "--untracked-files=normal",
                          timeout=120).decode(errors="replace")
    except CommandFailed as exc:
        return RootState(RootKind.FOREIGN, f"git cannot read its status ({exc.returncode})")
    changes = [line[3:] for line in status.splitlines() if line.strip()]
    local = [p for p in changes if not is_build_output(p)]
    if local:
        shown = ", ".join(local[:3]) + (", ..." if len(local) > 3 else "")
        return RootState(RootKind.FOREIGN, f"its checkout of {origin} has local changes ({shown})")
    return RootState(RootKind.ADOPTABLE, f"a clean checkout of {origin} made by another tool")


def claim_root(root: str, *, created: bool, adopted: bool) -> None:
    """Record that the tool owns ``root``.  The state folder appears with its owner record inside (made beside
    the root, then renamed in): a state folder without an owner is somebody else's (exit 64)."""
    record = Owner(created, adopted, time.time()).to_json()
    if not os.path.isdir(state_dir(root)):
        staging = tempfile.mkdtemp(prefix=".ensure_flydsl-claim-", dir=os.path.dirname(root))
        try:
            os.chmod(staging, 0o755)
            os.makedirs(os.path.join(staging, os.path.basename(stamps_dir(root))))
            atomic_write_json(os.path.join(staging, os.path.basename(owner_file(root))), record)
            rename_into_place(staging, state_dir(root))
        except OSError:
            remove_tree(staging)  # another caller's claim won the rename: write into theirs
    os.makedirs(stamps_dir(root), exist_ok=True)
    atomic_write_json(owner_file(root), record)


def exclude_from_git(root: str) -> None:
    """Keep the tool's files out of ``git status`` so the checkout reads as clean."""
    info = os.path.join(root, ".git", "info")
    if not os.path.isdir(os.path.join(root, ".git")):
        return
    os.makedirs(info, exist_ok=True)
    path = os.path.join(info, "exclude")
    try:
        with open(path) as handle:
            current = handle.read()
    except FileNotFoundError:
        current = ""
    wanted = ["/" + STATE_DIR + "/", "/" + ENV_FILE_NAME, "/" + ENV_JSON_NAME]
    missing = [w for w in wanted if w not in current.splitlines()]
    if missing:
        with open(path, "a") as handle:
            if current and not current.endswith("\n"):
                handle.write("\n")
            handle.write("\n".join(missing) + "\n")


@dataclass(frozen=True)
class Stamp:
    """``stamps/<step>.json``: the inputs a finished step was done for (the tree's: how, commit, version)."""

    key: Dict[str, object]
    time: float = 0.0
    how: Optional[str] = None
    commit: Optional[str] = None
    version: Optional[str] = None

    def to_json(self) -> Dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: object) -> Optional["Stamp"]:
        """The stamp, or None for a file that is not one (``how`` one of :class:`How`'s values, ``commit`` a git
        object name)."""
        if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
            return None
        named = {name: data.get(name) for name in ("how", "commit", "version")}
        if any(value is not None and not isinstance(value, str) for value in named.values()):
            return None
        if named["how"] is not None and fields.one_of(named["how"], _HOWS) is None:
            return None
        if named["commit"] is not None and fields.object_name(named["commit"]) is None:
            return None
        return cls(dict(data["key"]), fields.number(data.get("time")) or 0.0, fields.text(named["how"]),
                   fields.text(named["commit"]), fields.text(named["version"]))


_HOWS = frozenset(how.value for how in How)


class Stamps:

    def __init__(self, root: str) -> None:
        self.root = root
        self.folder = stamps_dir(root)

    def _path(self, step: str) -> str:
        return stamp_file(self.root, step)

    def read(self, step: str) -> Optional[Stamp]:
        return Stamp.from_json(read_json(self._path(step)))

    def done(self, step: str, key: Mapping[str, object]) -> bool:
        stamp = self.read(step)
        return stamp is not None and stamp.key == dict(key)

    def begin(self, step: str, key: Optional[Mapping[str, object]] = None) -> None:
        """Before a step runs: the tree is unfinished, the step not done, and (with ``key``) which inputs the
        files it is about to create are for."""
        remove_file(self._path("tree"))
        remove_file(self._path(step))
        if key is not None:
            os.makedirs(self.folder, exist_ok=True)
            atomic_write_json(self._path(step + ".started"), Stamp(dict(key), time.time()).to_json())

    def started_key(self, step: str) -> Optional[Dict[str, object]]:
        started = Stamp.from_json(read_json(self._path(step + ".started")))
        return started.key if started is not None else None

    def finish(self, step: str, key: Mapping[str, object], *, how: Optional[str] = None,
               commit: Optional[str] = None, version: Optional[str] = None) -> None:
        os.makedirs(self.folder, exist_ok=True)
        atomic_write_json(self._path(step), Stamp(key=dict(key), time=time.time(), how=how, commit=commit,
                                                  version=version).to_json())

    def undo(self, step: str) -> None:
        """The step's result turned out unusable: not done any more (its started record stays)."""
        remove_file(self._path("tree"))
        remove_file(self._path(step))

    def forget(self, step: str) -> None:
        remove_file(self._path(step))
        remove_file(self._path(step + ".started"))

    def steps(self) -> List[str]:
        try:
            return sorted(f[:-len(STAMP_SUFFIX)] for f in os.listdir(self.folder) if f.endswith(STAMP_SUFFIX))
        except FileNotFoundError:
            return []
