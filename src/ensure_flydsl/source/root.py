"""What a root holds and who made it: the owner record, the step stamps (removed before a step starts again), and
the record of what a step made in a shared folder (``clean`` removes only what it names unchanged)."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import StrEnum
from ensure_flydsl.layout import (
    BUILD_DIR,
    ENV_FILE_NAME,
    ENV_JSON_NAME,
    STATE_DIR,
    build_dir,
    build_made_record,
    owner_file,
    stamp_file,
    stamps_dir,
    state_dir,
)
from ensure_flydsl.result import How
from ensure_flydsl.source.git import Checkout, add_lines, git_locks, read_git
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import Record, checked
from ensure_flydsl.support.files import (
    atomic_write,
    atomic_write_json,
    read_json,
    remove_file,
    remove_tree,
    rename_into_place,
)
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.support.urls import same_repo, shown_location

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
    """``owner.json``: the tool made the root, or adopted another's clean checkout (a bad field: its default)."""

    created_root: bool = checked(fields.boolean, False, lenient=True)
    adopted: bool = checked(fields.boolean, False, lenient=True)
    time: float = checked(fields.number, 0.0, lenient=True)
    tool: str = checked(fields.text, "ensure-flydsl", lenient=True)


def owner(root: str) -> Optional[Owner]:
    return Owner.from_json(read_json(owner_file(root)))


class RootKind(StrEnum):
    """What the root is to the tool."""

    ABSENT = "absent"  # nothing there: created and claimed
    EMPTY = "empty"  # an empty folder: claimed
    OURS = "ours"  # the tool made or claimed it
    CONTRACT_ONLY = "contract-only"  # only env files (the contract's): claimed
    ADOPTABLE = "adoptable"  # a clean checkout another tool made: claimed when the build starts
    FOREIGN = "foreign"  # somebody else's: refused


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
    same, origin = same_repo(origin, repo), shown_location(origin)
    if not same:
        return RootState(RootKind.FOREIGN, f"it is a checkout of {origin}, not of the configured repository "
                         f"{shown_location(repo)}")
    held = git_locks(root)
    if held:
        return RootState(RootKind.FOREIGN, f"git holds .git/{held[0]} in it (a git command running, or killed)")
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
    if os.path.isdir(os.path.join(root, ".git")):
        add_lines(os.path.join(root, ".git", "info", "exclude"),
                  ["/" + STATE_DIR + "/", "/" + ENV_FILE_NAME, "/" + ENV_JSON_NAME])


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


Entry = Optional[Tuple[int, int]]  # (size, mtime_ns) of a file or link; None for a folder
Listing = Dict[str, Entry]
_VERSION = 1


@dataclass(frozen=True)
class MadeRecord:
    """What the steps made in a folder; ``open`` while one runs, with ``theirs`` from its start."""

    entries: Listing = field(default_factory=dict)
    open: bool = False
    theirs: FrozenSet[str] = frozenset()

    def owns(self, rel: str, entry: Entry) -> bool:
        """Whether the entry at ``rel``, as it is now, is the tool's."""
        if rel in self.entries and (entry is None or self.entries[rel] == entry):
            return True
        if self.open and rel not in self.theirs:
            return True  # made by a step that was killed before it could say so
        # ``x/__pycache__`` (a folder) or ``x/__pycache__/m.cpython-311.pyc`` (a file) where ``x`` is ours
        parts = rel.split("/")
        if parts[-1] == "__pycache__" and entry is None:
            owner = parts[:-1]
        elif len(parts) >= 2 and parts[-2] == "__pycache__" and parts[-1].endswith(".pyc") and entry is not None:
            owner = parts[:-2]
        else:
            return False
        return bool(owner) and "/".join(owner) in self.entries

    def to_json(self) -> Dict[str, object]:
        return {"version": _VERSION, "open": self.open, "theirs": sorted(self.theirs),
                "entries": {rel: list(v) if v is not None else None for rel, v in self.entries.items()}}

    @classmethod
    def from_json(cls, data: object) -> "MadeRecord":
        """The record, field by field; an empty one (nothing is the tool's) for what is not one."""
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            return cls()
        entries, theirs = data.get("entries"), data.get("theirs", [])
        if not isinstance(entries, dict) or not isinstance(theirs, list) or not isinstance(data.get("open"), bool):
            return cls()
        listing: Listing = {}
        for rel, value in entries.items():
            # a relative path without empty, "." or ".." parts (a leading "/" makes an empty one)
            if not isinstance(rel, str) or "\0" in rel or any(part in ("", ".", "..") for part in rel.split("/")):
                continue
            if value is None:
                listing[rel] = None
            elif isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
                listing[rel] = (value[0], value[1])
        return cls(listing, data["open"], frozenset(t for t in theirs if isinstance(t, str)))


def listing(folder: str) -> Listing:
    """Every entry under ``folder`` (links not followed), by path relative to it; empty if it is absent."""
    found: Listing = {}
    for current, dirs, files in os.walk(folder):
        rel = os.path.relpath(current, folder)
        prefix = "" if rel == "." else rel + "/"
        for name in [*dirs, *files]:
            try:
                st = os.lstat(os.path.join(current, name))
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                found[prefix + name] = None
            else:  # a file, or a link (to a folder too: an entry, never walked into)
                found[prefix + name] = (st.st_size, st.st_mtime_ns)
    return found


def read_record(path: str) -> MadeRecord:
    """The record at ``path``; an empty one for a missing, torn or foreign file."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return MadeRecord.from_json(json.load(handle))
    except (OSError, EOFError, ValueError, UnicodeDecodeError):
        return MadeRecord()


def write_record(path: str, record: MadeRecord) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.dumps(record.to_json(), sort_keys=True).encode()
    # gzip'd: an LLVM build is about 200,000 entries
    atomic_write(path, gzip.compress(data, compresslevel=3, mtime=0))


@contextlib.contextmanager
def recording(folder: str, record: str) -> Iterator[None]:
    """Around a step writing into ``folder``: record what is not ours at its start, and what it made at its end."""
    before = listing(folder)
    known = read_record(record)
    theirs = frozenset(rel for rel, entry in before.items() if not known.owns(rel, entry))
    # Best effort, both times: a full disk must fail the step with its own error.
    with contextlib.suppress(OSError):
        write_record(record, MadeRecord({rel: e for rel, e in before.items() if rel not in theirs}, True, theirs))
    try:
        yield
    finally:
        after = listing(folder)
        with contextlib.suppress(OSError):
            write_record(record, MadeRecord({rel: e for rel, e in after.items() if rel not in theirs}))


def sort_made(folder: str, record: str) -> Tuple[List[str], List[str]]:
    """(the tool's entries, deepest first; somebody else's, the topmost of each part: a folder, not each file)."""
    made = read_record(record)
    now = listing(folder)
    ours = [rel for rel in now if made.owns(rel, now[rel])]
    theirs = {rel for rel in now if not made.owns(rel, now[rel])}

    def inside_theirs(rel: str) -> bool:
        parts = rel.split("/")
        return any("/".join(parts[:i]) in theirs for i in range(1, len(parts)))

    return sorted(ours, key=lambda r: r.count("/"), reverse=True), sorted(r for r in theirs if not inside_theirs(r))


def remove_made(folder: str, record: str) -> List[str]:
    """Remove the tool's entries (and the folder and record once empty); return somebody else's, kept."""
    ours, theirs = sort_made(folder, record)
    for rel in ours:
        path = os.path.join(folder, rel)
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            else:
                os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(folder)
    if not os.path.lexists(folder):
        with contextlib.suppress(OSError):
            os.unlink(record)
    return theirs


def other_roots(base_dir: str, root: str) -> List[str]:
    """The other roots of this tool in the same folder (they share its LLVM build)."""
    try:
        names = os.listdir(base_dir)
    except OSError:
        return []
    return [os.path.join(base_dir, n) for n in sorted(names)
            if os.path.join(base_dir, n) != root and is_ours(os.path.join(base_dir, n))]


def foreign_files(checkout: Checkout) -> List[str]:
    """Files in the root the tool did not put there: changed, untracked, ignored, and not made in build-fly/."""
    root = checkout.root
    build_folder = build_dir(root)
    inside = [] if not os.path.isdir(build_folder) or os.path.islink(build_folder) else \
        [BUILD_DIR + "/" + rel for rel in sort_made(build_folder, build_made_record(root))[1]]
    if not os.path.isdir(os.path.join(root, ".git")):
        return [e for e in sorted(os.listdir(root)) if not tool_file(root, e)] + inside
    try:
        # ignored ones too: FlyDSL's .gitignore matches *.diff, *.log, what people write
        out = checkout.git("status", "--porcelain=v1", "-z", "--untracked-files=normal", "--ignored=matching")
        made = owner(root)  # an adopted checkout's branches are its maker's, and it is never removed
        theirs = _commits_of_somebodys(checkout) if made is not None and made.created_root else []
    except CommandFailed:
        return ["(git status failed: nothing can be proven to be the tool's)"]
    paths = [entry[3:] for entry in out.split("\0") if len(entry) > 3]
    return theirs + [p for p in paths if not tool_file(root, p)] + inside


def _commits_of_somebodys(checkout: Checkout) -> List[str]:
    """What holds commits git status does not show: a branch, a stash (the tool makes neither), and a HEAD moved by
    more than a checkout (a commit on it, a reset)."""
    refs = dict(line.split(" ", 1) for line in checkout.git("for-each-ref", "--format=%(refname) %(objectname)")
                .splitlines())
    theirs = [ref for ref in refs if not ref.startswith(("refs/tags/", "refs/remotes/origin/"))]
    head = checkout.head_commit()
    if head is None or head in (refs[ref] for ref in theirs):
        return theirs
    moved = checkout.git("log", "-g", "-1", "--format=%gs", "HEAD").strip()
    return theirs + (["HEAD"] if moved and not moved.startswith("checkout:") else [])


def tool_file(root: str, path: str) -> bool:
    """Whether ``path`` in the root is the tool's: a build output, a record, a bytecode cache."""
    if is_build_output(path):
        return True
    parts = path.rstrip("/").split("/")
    if parts[-1] == "__pycache__":
        folder = os.path.join(root, *parts)
        return os.path.isdir(folder) and all(name.endswith(".pyc") for name in os.listdir(folder))
    return len(parts) >= 2 and parts[-2] == "__pycache__" and parts[-1].endswith(".pyc")
