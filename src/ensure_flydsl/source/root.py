"""What the tool knows about a root (``ROOT/.ensure_flydsl/``): ``owner.json`` when it made or adopted the root;
``stamps/<step>.json`` with the key of a finished step's inputs, removed before the step starts again (uv's
``.ok``); ``stamps/<step>.started.json`` for a step that creates files; ``stamps/tree.json`` for the finished tree.
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
from ensure_flydsl.support.fields import Record, checked
from ensure_flydsl.support.files import atomic_write_json, read_json, remove_file, remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed

# Files a root may hold that are ours by contract (the bash executor wrote them too), not somebody's work.
CONTRACT_FILES = (ENV_FILE_NAME, ENV_JSON_NAME)
# Untracked paths in a checkout that are build outputs or ours, not local changes.
BUILD_OUTPUTS = (STATE_DIR + "/", BUILD_DIR + "/", ENV_FILE_NAME, ENV_JSON_NAME)
_HOWS = frozenset(how.value for how in How)


def is_build_output(path: str) -> bool:
    """Whether a path in a checkout (as git status spells it) is a build output or the tool's own."""
    return any(path.rstrip("/") == o.rstrip("/") or path.startswith(o) for o in BUILD_OUTPUTS)


def is_ours(root: str) -> bool:
    return os.path.isfile(owner_file(root))


def _shown(names: List[str]) -> str:
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


@dataclass(frozen=True)
class Owner(Record):
    """``owner.json``: the tool made the root, or adopted another tool's clean checkout.  A field of the wrong
    type reads as its default."""

    created_root: bool = checked(fields.boolean, False, lenient=True)
    adopted: bool = checked(fields.boolean, False, lenient=True)
    time: float = checked(fields.number, 0.0, lenient=True)
    tool: str = checked(fields.text, "ensure-flydsl", lenient=True)


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
        return RootState(RootKind.FOREIGN, f"it holds other files ({_shown(sorted(entries))}) and is not a "
                         "checkout made by ensure-flydsl")
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
    local = [line[3:] for line in status.splitlines() if line.strip() and not is_build_output(line[3:])]
    if local:
        return RootState(RootKind.FOREIGN, f"its checkout of {origin} has local changes ({_shown(local)})")
    return RootState(RootKind.ADOPTABLE, f"a clean checkout of {origin} made by another tool")


def claim_root(root: str, *, created: bool, adopted: bool) -> None:
    """Record that the tool owns ``root``.  The state folder appears with its owner record inside (made beside
    the root, then renamed in): a state folder without an owner is somebody else's (exit 64)."""
    record = asdict(Owner(created, adopted, time.time()))
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
    if not os.path.isdir(os.path.join(root, ".git")):
        return
    path = os.path.join(root, ".git", "info", "exclude")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as handle:
            current = handle.read()
    except FileNotFoundError:
        current = ""
    missing = [w for w in ("/" + STATE_DIR + "/", "/" + ENV_FILE_NAME, "/" + ENV_JSON_NAME)
               if w not in current.splitlines()]
    if missing:
        with open(path, "a") as handle:
            handle.write(("\n" if current and not current.endswith("\n") else "") + "\n".join(missing) + "\n")


@dataclass(frozen=True)
class Stamp(Record):
    """``stamps/<step>.json``: the inputs a finished step was done for (the tree's: how, commit, version)."""

    key: Dict[str, object] = checked(fields.mapping, convert=dict)
    time: float = checked(fields.number, 0.0, lenient=True)
    how: Optional[str] = checked(lambda v: fields.one_of(v, _HOWS), None)
    commit: Optional[str] = checked(fields.object_name, None)
    version: Optional[str] = checked(fields.text, None)

    def to_json(self) -> Dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Stamps:
    """The step stamps of ``root``."""

    root: str

    def read(self, step: str) -> Optional[Stamp]:
        return Stamp.from_json(read_json(stamp_file(self.root, step)))

    def done(self, step: str, key: Mapping[str, object]) -> bool:
        stamp = self.read(step)
        return stamp is not None and stamp.key == dict(key)

    def begin(self, step: str, key: Optional[Mapping[str, object]] = None) -> None:
        """Before a step runs: the tree unfinished, the step not done; ``key``: the inputs of what it creates."""
        self.undo(step)
        if key is not None:
            os.makedirs(stamps_dir(self.root), exist_ok=True)
            atomic_write_json(stamp_file(self.root, step + ".started"), Stamp(dict(key), time.time()).to_json())

    def started_key(self, step: str) -> Optional[Dict[str, object]]:
        started = self.read(step + ".started")
        return started.key if started is not None else None

    def finish(self, step: str, key: Mapping[str, object], *, how: Optional[str] = None,
               commit: Optional[str] = None, version: Optional[str] = None) -> None:
        os.makedirs(stamps_dir(self.root), exist_ok=True)
        stamp = Stamp(dict(key), time.time(), how=how, commit=commit, version=version)
        atomic_write_json(stamp_file(self.root, step), stamp.to_json())

    def undo(self, step: str) -> None:
        """The step's result turned out unusable: not done any more (its started record stays)."""
        remove_file(stamp_file(self.root, "tree"))
        remove_file(stamp_file(self.root, step))
