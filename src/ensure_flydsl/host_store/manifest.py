"""A tree's manifest: every entry under it (folder, file with its sha256 and size and whether it is executable,
symbolic link with its target), written when the tree is added to the store and read back field by field:
a manifest is outside data (another run, another version, anybody with the folder's rights wrote it)."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Dict, List, Optional, Tuple

from ensure_flydsl.support import fields

FORMAT = 1
HOWS = ("released", "built", "cached")
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
_KEY = re.compile(r"^[0-9a-f]{32,64}\Z")
CHUNK = 1 << 20


class Entry:
    """One entry of a tree: ``kind`` "dir", "file" or "link"."""

    __slots__ = ("executable", "kind", "path", "sha256", "size", "target")

    def __init__(self, path: str, kind: str, *, sha256: str = "", size: int = 0, executable: bool = False,
                 target: str = "") -> None:
        self.path, self.kind, self.sha256, self.size = path, kind, sha256, size
        self.executable, self.target = executable, target

    def to_json(self) -> Dict[str, object]:
        if self.kind == "file":
            return {"path": self.path, "kind": "file", "sha256": self.sha256, "size": self.size,
                    "executable": self.executable}
        if self.kind == "link":
            return {"path": self.path, "kind": "link", "target": self.target}
        return {"path": self.path, "kind": "dir"}


class Manifest:
    """What a stored tree is: its key, how it was first made, from which commit for which interpreter ABI, and
    its entries."""

    def __init__(self, key: str, how: str, commit: str, abi: str, entries: List[Entry],
                 root_specific: Optional[str] = None) -> None:
        self.key, self.how, self.commit, self.abi = key, how, commit, abi
        self.entries, self.root_specific = entries, root_specific

    @property
    def files(self) -> List[Entry]:
        return [e for e in self.entries if e.kind == "file"]

    @property
    def size(self) -> int:
        return sum(e.size for e in self.files)

    def to_json(self) -> Dict[str, object]:
        return {"format": FORMAT, "key": self.key, "how": self.how, "commit": self.commit, "abi": self.abi,
                "root_specific": self.root_specific, "size": self.size,
                "entries": [e.to_json() for e in self.entries]}


def hash_file(path: str, needle: bytes = b"") -> Tuple[str, bool]:
    """The sha256 of the regular file ``path`` and whether ``needle`` occurs in it (read once)."""
    digest, found, tail = hashlib.sha256(), False, b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if needle and not found:
                found = needle in tail + chunk
                tail = chunk[-len(needle):]
    return digest.hexdigest(), found


def scan(folder: str, root: str) -> Tuple[List[Entry], List[str]]:
    """Every entry under ``folder`` in a stable order, and the files that hold ``root``'s path (bytecode
    left out: Python puts the path it loads a module from into its code objects itself)."""
    entries: List[Entry] = []
    holding: List[str] = []
    needle = os.fsencode(root.rstrip("/") + "/")
    for current, dirs, files in os.walk(folder):
        dirs.sort()
        rel_dir = os.path.relpath(current, folder)
        for name in dirs + sorted(files):
            full = os.path.join(current, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                entries.append(Entry(rel, "link", target=os.readlink(full)))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(Entry(rel, "dir"))
            elif stat.S_ISREG(st.st_mode):
                bytecode = "/__pycache__/" in "/" + rel or rel.endswith((".pyc", ".pyo"))
                sha, found = hash_file(full, b"" if bytecode else needle)
                entries.append(Entry(rel, "file", sha256=sha, size=st.st_size,
                                     executable=bool(st.st_mode & 0o111)))
                if found:
                    holding.append(rel)
            else:
                raise OSError(f"{full} is neither a file, a folder nor a link (a FIFO, socket or device)")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(current, d))]
    return entries, holding


def safe_relative(path: str) -> bool:
    """A path inside the tree: relative, normal, no ``..``, no NUL, no empty part."""
    if not path or "\0" in path or path.startswith("/") or "\\" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _entry(item: object) -> Optional[Entry]:
    if not isinstance(item, dict):
        return None
    path, kind = fields.path(item.get("path")), fields.one_of(item.get("kind"), ("dir", "file", "link"))
    if path is None or kind is None or not safe_relative(path):
        return None
    if kind == "dir":
        return Entry(path, kind)
    if kind == "link":
        target = fields.path(item.get("target"))
        if target is None or target.startswith("/"):
            return None
        inside = os.path.normpath(os.path.join(os.path.dirname(path), target))
        return Entry(path, kind, target=target) if safe_relative(inside) else None
    sha, size, executable = fields.text(item.get("sha256")), fields.integer(item.get("size")), item.get("executable")
    if sha is None or not _SHA256.match(sha) or size is None or size < 0 or not isinstance(executable, bool):
        return None
    return Entry(path, kind, sha256=sha, size=size, executable=executable)


def parse(data: Optional[Dict[str, object]], key: str) -> Tuple[Optional[Manifest], str]:
    """The manifest in ``data`` when every field means what the store writes there (the key its folder has, a
    known format and origin, entries inside the tree, each path once, each folder listed before what it holds),
    else None and why."""
    if data is None:
        return None, "no readable manifest"
    if data.get("format") != FORMAT:
        return None, f"manifest format {data.get('format')!r}, not {FORMAT}"
    how, commit, abi = fields.one_of(data.get("how"), HOWS), fields.object_name(data.get("commit")), \
        fields.short_text(data.get("abi"))
    specific = data.get("root_specific")
    if data.get("key") != key or not _KEY.match(key):
        return None, f"its key is {data.get('key')!r}, not its folder's {key!r}"
    if how is None or commit is None or abi is None or not (specific is None or fields.absolute_path(specific)):
        return None, "a field has no meaning the store writes (how, commit, abi, root_specific)"
    raw = data.get("entries")
    if not isinstance(raw, list):
        return None, "no list of entries"
    entries: List[Entry] = []
    seen = {"": "dir"}
    for item in raw:
        entry = _entry(item)
        if entry is None:
            return None, f"entry {str(item)[:120]} is not a folder, file or link inside the tree"
        parent = entry.path.rpartition("/")[0]
        if entry.path in seen or seen.get(parent) != "dir":
            return None, f"entry {entry.path} is listed twice or before its folder"
        seen[entry.path] = entry.kind
        entries.append(entry)
    return Manifest(key=key,
                    how=how,
                    commit=commit,
                    abi=abi,
                    entries=entries,
                    root_specific=specific if isinstance(specific, str) else None), ""
