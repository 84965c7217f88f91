"""A stored tree in every tier: its members (path, type, mode, size, sha256 or link target), one manifest format;
untrusted, its members are checked before anything is written, and what lands is held against them."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import socket
import stat
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.support.fields import byte_count, integer, json_object, seconds, short_text, text
from ensure_flydsl.trees.backends import CacheCorrupt, StoredFile
from ensure_flydsl.version import __version__

FORMAT = 1
CHUNK = 1 << 20
TYPES = ("file", "dir", "symlink")
HOWS = ("released", "built", "cached")  # how a tree kept on this host was first made
MAX_MANIFEST_BYTES = 64 << 20  # about 150 bytes a member: a real tree takes a few MB
KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_MAX_SYMLINK_HOPS = 40  # the kernel's ELOOP limit
Seal = Dict[str, List[int]]  # path -> [inode, size, mtime_ns, ctime_ns] of a file as it was placed (JSON as is)


@dataclass(frozen=True)
class Member:
    path: str  # relative, "/"-separated, normalised
    type: str  # "file", "dir" or "symlink"
    mode: int  # permission bits
    size: int = 0  # bytes, for files
    sha256: Optional[str] = None  # for files
    target: Optional[str] = None  # for symlinks

    def to_json(self) -> Dict[str, object]:
        return {name: value for name, value in vars(self).items() if value is not None}

    @classmethod
    def from_json(cls, obj: object) -> "Member":
        """A manifest's member; ValueError when malformed (its safety is :func:`check_members`'s)."""
        if not isinstance(obj, dict):
            raise ValueError("a member is not a JSON object")
        path, kind, sha, target = obj.get("path"), obj.get("type"), obj.get("sha256"), obj.get("target")
        mode, size = integer(obj.get("mode")), byte_count(obj.get("size"))
        if not isinstance(path, str) or kind not in TYPES:
            raise ValueError(f"member {path!r} has no path or an unknown type {kind!r}")
        if mode is None or not 0 <= mode <= 0o7777 or size is None:
            raise ValueError(f"member {path!r} has a malformed mode or size")
        if kind == "file" and not (isinstance(sha, str) and HEX64.match(sha)):
            raise ValueError(f"member {path!r} has no sha256")
        if kind == "symlink" and not isinstance(target, str):
            raise ValueError(f"symlink {path!r} has no target")
        return cls(path=path, type=str(kind), mode=mode, size=size, sha256=sha if kind == "file" else None,
                   target=target if kind == "symlink" else None)


def walk(root: str) -> List[Tuple[Member, str]]:
    """The folder's members (without hashes) and their paths: sorted, depth-first, folders before contents."""
    found: List[Tuple[Member, str]] = []

    def visit(folder: str, prefix: str) -> None:
        for name in sorted(os.listdir(folder)):
            full, rel = os.path.join(folder, name), prefix + name
            st = os.lstat(full)
            mode = stat.S_IMODE(st.st_mode) & 0o777
            if stat.S_ISDIR(st.st_mode):
                found.append((Member(rel, "dir", mode), full))
                visit(full, rel + "/")
            elif stat.S_ISLNK(st.st_mode):
                found.append((Member(rel, "symlink", mode, target=os.readlink(full)), full))
            elif stat.S_ISREG(st.st_mode):
                found.append((Member(rel, "file", mode, size=st.st_size), full))
            else:
                raise CacheCorrupt(f"{rel!r} is not a regular file, folder or symlink")

    visit(root, "")
    return found


def hash_file(path: str, needle: bytes = b"") -> Tuple[str, bool]:
    """The sha256 of the regular file ``path`` and whether ``needle`` occurs in it (read once)."""
    digest, found, tail = hashlib.sha256(), False, b""
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
            if needle and not found:
                found = needle in tail + chunk
                tail = chunk[-len(needle):]
    return digest.hexdigest(), found


def hashed_members(folder: str, needle: bytes = b"") -> Tuple[List[Member], List[str]]:
    """Every member of ``folder`` with its hash, and the files besides bytecode that hold ``needle``."""
    members, holding = [], []
    for member, full in walk(folder):
        if member.type == "file":
            bytecode = "__pycache__/" in member.path or member.path.endswith((".pyc", ".pyo"))
            sha, found = hash_file(full, b"" if bytecode else needle)
            member = replace(member, sha256=sha)
            if found:
                holding.append(member.path)
        members.append(member)
    return members, holding


def check_members(members: Sequence[Member]) -> None:
    """Refuse anything that could write or point outside the destination, or alias a path (CacheCorrupt)."""
    seen: Dict[str, Member] = {}
    for member in members:
        path = member.path
        if path.startswith("/"):
            raise CacheCorrupt(f"member {path!r} is an absolute path")
        if ".." in path.split("/"):
            raise CacheCorrupt(f"member {path!r} escapes the destination")
        if not path or "\x00" in path or path != posixpath.normpath(path) or path == ".":
            raise CacheCorrupt(f"member {path!r} is not a normalised relative path")
        if member.type not in TYPES:
            raise CacheCorrupt(f"member {path!r} has the unsupported type {member.type!r}")
        if path in seen:
            raise CacheCorrupt(f"member {path!r} appears twice")
        if member.type == "symlink":
            _check_symlink(member, seen)  # before any member can be written through it
        parent = posixpath.dirname(path)
        if parent:
            holder = seen.get(parent)
            if holder is not None and holder.type == "symlink":
                raise CacheCorrupt(f"member {path!r} is written through the symlink {parent!r}")
            if holder is None or holder.type != "dir":
                raise CacheCorrupt(f"member {path!r} does not follow its folder {parent!r}")
        seen[path] = member
    for member in members:
        if member.type == "symlink":
            _check_symlink(member, seen)  # again, now that every link it may go through is known


def _check_symlink(member: Member, members: Dict[str, Member]) -> None:
    target = str(member.target)
    if target.startswith("/"):
        raise CacheCorrupt(f"symlink {member.path!r} points to the absolute path {target!r}")
    if not target or _escapes(member.path, target, members):
        raise CacheCorrupt(f"symlink {member.path!r} -> {target!r} resolves outside the destination")


def _escapes(link: str, target: str, members: Dict[str, Member]) -> bool:
    """Whether ``target``, resolved from ``link``'s folder through the tree's own links, leaves the tree (with
    ``a -> b/c`` and ``b/c -> ..``, ``x -> a/..`` looks like ``.`` but is the parent)."""
    stack, todo, hops = link.split("/")[:-1], target.split("/"), 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                return True
            stack.pop()
            continue
        stack.append(part)
        hit = members.get("/".join(stack))
        if hit is not None and hit.type == "symlink":
            hops += 1
            if hops > _MAX_SYMLINK_HOPS or str(hit.target).startswith("/"):
                return True
            stack.pop()
            todo = str(hit.target).split("/") + todo
    return False


def stat_seal(st: os.stat_result) -> List[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def check_tree(tree: str, members: Sequence[Member], seal: Mapping[str, object], *, full: bool = False) -> None:
    """CacheCorrupt unless each member is at ``tree`` (a file hashed when ``full`` or its stat is not the seal's)."""
    for member in members:
        path = os.path.join(tree, member.path)
        try:
            st = os.lstat(path)
        except OSError:
            raise CacheCorrupt(f"{member.path} is missing") from None
        if member.type == "dir":
            if not stat.S_ISDIR(st.st_mode):
                raise CacheCorrupt(f"{member.path} is not a folder")
        elif member.type == "symlink":
            if not stat.S_ISLNK(st.st_mode) or os.readlink(path) != member.target:
                raise CacheCorrupt(f"{member.path} is not the link to {member.target}")
        elif not stat.S_ISREG(st.st_mode) or st.st_size != member.size:
            raise CacheCorrupt(f"{member.path} is not a file of {member.size} bytes")
        elif (full or seal.get(member.path) != stat_seal(st)) and hash_file(path)[0] != member.sha256:
            raise CacheCorrupt(f"{member.path} does not match its sha256 in the manifest")


@dataclass(frozen=True)
class CacheEntry:
    """One stored tree's manifest: a shared store's entry (with its blob) or a tree kept on this host."""

    kind: str  # "tree" or "mlir" ("orphan" only in what prune returns: a file no manifest names)
    key: str  # cache_key(kind, fields)
    blob: str = ""  # sha256 of the artifact's bytes ("" for a tree kept unpacked on this host)
    size: int = 0  # the artifact's bytes (the files' bytes for a tree kept on this host)
    created: float = 0.0
    fields: Dict[str, object] = field(default_factory=dict)  # the key fields, for people (cache list)
    members: Tuple[Member, ...] = field(default=(), repr=False, compare=False)
    host: str = ""
    tool: str = ""
    how: str = ""  # a tree kept on this host: how it was first made (HOWS)
    signed_by: Tuple[str, ...] = ()  # a tree kept on this host from a cache entry: the trusted keys that signed it
    manifest: bytes = field(default=b"", repr=False, compare=False)  # the exact bytes, what a signature covers
    path: str = field(default="", repr=False, compare=False)  # where the manifest is in its store
    used: float = field(default=0.0, compare=False)  # a tree kept on this host: when a root last copied it
    problem: str = ""  # a tree kept on this host: why it cannot be used (a prune removes it first)

    @property
    def files(self) -> int:
        return sum(1 for m in self.members if m.type == "file")

    @property
    def variant(self) -> str:
        """The signer whose variant this entry is (its manifest at ``<key>.by/<NAME>.json``), else ""."""
        folder, _, leaf = self.path.rpartition("/")
        return leaf[: -len(".json")] if folder.endswith(".by") and leaf.endswith(".json") else ""

    def to_json(self) -> Dict[str, object]:
        return {"kind": self.kind, "key": self.key, "blob": self.blob, "size": self.size, "created": self.created,
                "fields": self.fields, "files": self.files, "host": self.host, "tool": self.tool,
                "path": self.path, "variant": self.variant or None}

    @property
    def signers(self) -> List[str]:
        """A tree kept on this host: the names of the trusted keys (NAME:BASE64) that signed its cache entry."""
        return [line.partition(":")[0] for line in self.signed_by]

    def tree_json(self) -> Dict[str, object]:
        """A tree kept on this host as ``store list --json`` shows it."""
        return {"key": self.key, "size": self.size, "files": self.files, "how": self.how or None,
                "commit": text(self.fields.get("commit")), "abi": text(self.fields.get("abi")),
                "last_used": round(self.used, 3), "signed_by": self.signers, "problem": self.problem or None}


def cache_key(kind: str, fields: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of ``{"kind": kind, **fields}``."""
    if "kind" in fields:
        raise ValueError("the key fields may not contain 'kind'; it is the cache_key argument")
    try:
        text = json.dumps({"kind": kind, **fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cache key fields must be JSON values: {exc}") from None
    return hashlib.sha256(text.encode()).hexdigest()


def check_name(kind: str, key: str) -> None:
    if not KIND.match(kind):
        raise ValueError(f"cache kind {kind!r} is not a short lower-case name such as 'tree' or 'mlir'")
    if not HEX64.match(key):
        raise ValueError(f"cache key {key!r} is not a hex sha256 (use cache_key)")


def new_entry(kind: str, key: str, fields: Mapping[str, object], members: Sequence[Member], *, size: int,
              blob: str = "", how: str = "", signed_by: Sequence[str] = ()) -> CacheEntry:
    """An entry stored now, by this host and this tool."""
    return CacheEntry(kind=kind, key=key, blob=blob, size=size, created=time.time(), fields=dict(fields),
                      members=tuple(members), host=socket.gethostname(), tool=f"ensure-flydsl {__version__}", how=how,
                      signed_by=tuple(signed_by))


def orphan_entry(stored: StoredFile, sha: str) -> CacheEntry:
    return CacheEntry(kind="orphan", key="", blob=sha, size=stored.size, created=stored.mtime or 0.0,
                      fields={"path": stored.path})


def manifest_bytes(entry: CacheEntry) -> bytes:
    data = {"format": FORMAT, "kind": entry.kind, "key": entry.key, "fields": entry.fields, "blob": entry.blob,
            "size": entry.size, "created": entry.created, "host": entry.host, "tool": entry.tool,
            "members": [m.to_json() for m in entry.members]}
    if entry.how:
        data["how"] = entry.how
    if entry.signed_by:
        data["signed_by"] = list(entry.signed_by)
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


class NewerFormat(ValueError):
    """A manifest of a newer format than this tool's: a later version's, never replaced."""


def parse_manifest(data: bytes, path: str = "", *, unpacked: bool = False) -> CacheEntry:
    """The entry a manifest describes (``unpacked``: a host tree's, with no blob); ValueError otherwise."""
    obj = json_object(data)
    fmt = obj.get("format")
    if fmt != FORMAT:
        newer = isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT
        raise (NewerFormat if newer else ValueError)(f"format {fmt!r}, this tool reads {FORMAT}")
    kind, key, blob, fields = obj.get("kind"), obj.get("key"), obj.get("blob"), obj.get("fields")
    if not (isinstance(kind, str) and isinstance(key, str) and KIND.match(kind) and HEX64.match(key)):
        raise ValueError("kind or key missing or malformed")
    if not isinstance(fields, dict) or cache_key(kind, fields) != key:
        raise ValueError("its key is not the hash of its fields")
    if not (isinstance(blob, str) and (blob == "" if unpacked else HEX64.match(blob))):
        raise ValueError("blob is not a sha256")
    how = obj.get("how", "")
    if unpacked and how not in HOWS:
        raise ValueError(f"how {how!r} is none of {', '.join(HOWS)}")
    size, created, raw_members = byte_count(obj.get("size")), seconds(obj.get("created")), obj.get("members")
    if size is None or created is None:  # size: up to a pebibyte; created: a time (not NaN, nor past 2286)
        raise ValueError("size or created missing or out of range")
    if not isinstance(raw_members, list):
        raise ValueError("members missing")
    members = tuple(Member.from_json(m) for m in raw_members)
    signed_by = obj.get("signed_by", [])
    if not isinstance(signed_by, list) or not all(isinstance(k, str) and short_text(k) == k for k in signed_by):
        raise ValueError("signed_by is not a list of keys")
    return CacheEntry(kind=kind, key=key, blob=blob, size=size, created=float(created), fields=fields, members=members,
                      host=short_text(obj.get("host")) or "", tool=short_text(obj.get("tool")) or "",
                      how=how if isinstance(how, str) else "", signed_by=tuple(signed_by), manifest=data, path=path)


def prune_order(entries: Sequence[CacheEntry], max_bytes: int,
                total: Callable[[Sequence[CacheEntry]], int]) -> List[CacheEntry]:
    """What a prune of any tier removes: the damaged, then the longest unused, until the rest total at most
    ``max_bytes`` (``total``: what they take in that tier)."""
    if max_bytes < 0:
        raise ValueError("max_bytes must be >= 0")
    staying = sorted(entries, key=lambda entry: (not entry.problem, entry.used or entry.created))
    removed: List[CacheEntry] = []
    while staying and (staying[0].problem or total(staying) > max_bytes):
        removed.append(staying.pop(0))
    return removed
