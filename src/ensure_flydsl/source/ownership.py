"""What a root and its folder hold that is the tool's, and what is somebody else's (``clean`` asks here).
A build step writing into a shared folder (``ROOT/build-fly``, ``BASE/llvm-project``) records what it made, less
what was somebody else's at its start; ``clean`` removes only what the record names unchanged."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import stat
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Iterator, List, Optional, Tuple

from ensure_flydsl.layout import BUILD_DIR, build_dir, build_made_record
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.source.root import is_build_output, is_ours
from ensure_flydsl.support.files import atomic_write
from ensure_flydsl.support.processes import CommandFailed

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
        return self._bytecode_beside(rel, entry)

    def _bytecode_beside(self, rel: str, entry: Entry) -> bool:
        """``x/__pycache__`` (a folder) or ``x/__pycache__/m.cpython-311.pyc`` (a file) where ``x`` is ours."""
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
            if not _plain_relative(rel):
                continue
            if value is None:
                listing[rel] = None
            elif (isinstance(value, list) and len(value) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
                listing[rel] = (value[0], value[1])
        return cls(listing, data["open"] is True, frozenset(t for t in theirs if isinstance(t, str)))


def _plain_relative(rel: object) -> bool:
    return (isinstance(rel, str) and bool(rel) and "\0" not in rel and not rel.startswith("/")
            and all(part not in ("", ".", "..") for part in rel.split("/")))


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
    except CommandFailed:
        return ["(git status failed: nothing can be proven to be the tool's)"]
    paths = [entry[3:] for entry in out.split("\0") if len(entry) > 3]
    return [p for p in paths if not tool_file(root, p)] + inside


def tool_file(root: str, path: str) -> bool:
    """Whether ``path`` in the root is the tool's: a build output, a record, a bytecode cache."""
    if is_build_output(path):
        return True
    parts = path.rstrip("/").split("/")
    if parts[-1] == "__pycache__":
        folder = os.path.join(root, *parts)
        return os.path.isdir(folder) and all(name.endswith(".pyc") for name in os.listdir(folder))
    return len(parts) >= 2 and parts[-2] == "__pycache__" and parts[-1].endswith(".pyc")
