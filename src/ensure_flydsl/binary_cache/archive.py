"""The cache's artifact format: a deterministic gzip'd tar of a folder, and the checks before extracting one.

Only regular files, folders and relative symlinks that stay inside the tree are allowed.  The checks run
on the member headers, before a single byte is extracted, because a tarball from a shared cache is
untrusted input: ``tarfile.extractall`` (without the filters of Python 3.12) writes ``../x``, absolute
paths, device files, and files through a symlink planted by an earlier member (CVE-2007-4559 and its
many rediscoveries).  Extraction then creates each path itself, exclusively, never following a symlink.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass, replace
from typing import IO, Dict, List, Optional, Sequence, Set, Tuple, cast

from ensure_flydsl.binary_cache.store import CacheCorrupt
from ensure_flydsl.support.fields import integer

CHUNK = 1 << 20
TYPES = ("file", "dir", "symlink")
_MAX_SYMLINK_HOPS = 40  # as the kernel's ELOOP limit
_HEX = set("0123456789abcdef")


@dataclass(frozen=True)
class Member:
    path: str  # relative, "/"-separated, normalised
    type: str  # "file", "dir" or "symlink"
    mode: int  # permission bits (0o777 at most)
    size: int = 0  # bytes, for files
    sha256: Optional[str] = None  # for files
    target: Optional[str] = None  # for symlinks

    def to_json(self) -> Dict[str, object]:
        data: Dict[str, object] = {"path": self.path, "type": self.type, "mode": self.mode, "size": self.size}
        if self.type == "file":
            data["sha256"] = self.sha256
        if self.type == "symlink":
            data["target"] = self.target
        return data

    @classmethod
    def from_json(cls, obj: object) -> "Member":
        """A manifest's member record; ValueError when it is malformed (its safety is checked later)."""
        if not isinstance(obj, dict):
            raise ValueError("a member is not a JSON object")
        path, kind, mode, size = obj.get("path"), obj.get("type"), obj.get("mode"), obj.get("size")
        sha, target = obj.get("sha256"), obj.get("target")
        if not isinstance(path, str) or kind not in TYPES:
            raise ValueError(f"member {path!r} has no path or an unknown type {kind!r}")
        mode, size = integer(mode), integer(size)  # a bool is no number
        if mode is None or not 0 <= mode <= 0o7777 or size is None or size < 0:
            raise ValueError(f"member {path!r} has a malformed mode or size")
        if kind == "file" and not (isinstance(sha, str) and len(sha) == 64 and set(sha) <= _HEX):
            raise ValueError(f"member {path!r} has no sha256")
        if kind == "symlink" and not isinstance(target, str):
            raise ValueError(f"symlink {path!r} has no target")
        return cls(path, str(kind), mode, size, sha if kind == "file" else None,
                   target if kind == "symlink" else None)


def walk(root: str) -> List[Tuple[Member, str]]:
    """The folder's members (without hashes) and their paths: sorted, depth-first, folders before contents."""
    found: List[Tuple[Member, str]] = []

    def visit(folder: str, prefix: str) -> None:
        for name in sorted(os.listdir(folder)):
            full = os.path.join(folder, name)
            rel = prefix + name
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


class _HashingWriter:
    """Counts and hashes what gzip writes, so the blob's name is known without reading it again."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


class _HashingReader:
    """Hashes a file while tarfile copies it: the manifest holds the hash of the bytes that went in."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        return data


def pack(source: str, out: IO[bytes]) -> Tuple[str, int, List[Member]]:
    """Write the gzip'd tar of ``source`` to ``out``; return its sha256, its size and the members.

    Same folder, same bytes: sorted members, owners zeroed, no gzip time stamp or file name.  The files'
    own mtimes are kept (a ``.pyc`` records its source's mtime; zeroing them would make every one stale).
    """
    sink = _HashingWriter(out)
    members: List[Member] = []
    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for member, full in walk(source):
                info = tarfile.TarInfo(member.path)
                info.mode = member.mode
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = int(os.lstat(full).st_mtime)
                if member.type == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif member.type == "symlink":
                    info.type = tarfile.SYMTYPE
                    info.linkname = str(member.target)
                    tar.addfile(info)
                else:
                    info.size = member.size
                    with open(full, "rb") as handle:
                        reader = _HashingReader(handle)
                        tar.addfile(info, cast(IO[bytes], reader))
                    member = replace(member, sha256=reader.digest.hexdigest())
                members.append(member)
    out.flush()
    os.fsync(out.fileno())
    return sink.digest.hexdigest(), sink.size, members


def member_of(info: tarfile.TarInfo) -> Member:
    """The member a tar header declares; CacheCorrupt for any type the cache never writes."""
    name = info.name
    if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return Member(name, "file", info.mode, size=info.size)
    if info.type == tarfile.DIRTYPE:
        return Member(name, "dir", info.mode)
    if info.type == tarfile.SYMTYPE:
        return Member(name, "symlink", info.mode, target=info.linkname)
    if info.type == tarfile.LNKTYPE:
        raise CacheCorrupt(f"member {name!r} is a hard link (to {info.linkname!r})")
    if info.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        raise CacheCorrupt(f"member {name!r} is a device file")
    if info.type == tarfile.FIFOTYPE:
        raise CacheCorrupt(f"member {name!r} is a fifo")
    raise CacheCorrupt(f"member {name!r} has the unsupported tar type {info.type!r}")


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
        parent = posixpath.dirname(path)
        if member.type == "symlink":
            _check_symlink(member, seen)  # before any member can be written through it
        if parent:
            holder = seen.get(parent)
            if holder is not None and holder.type == "symlink":
                raise CacheCorrupt(f"member {path!r} is written through the symlink {parent!r}")
            if holder is None or holder.type != "dir":
                raise CacheCorrupt(f"member {path!r} does not follow its folder {parent!r}")
        seen[path] = member
    for member in members:
        if member.type == "symlink":
            _check_symlink(member, seen)  # again, now that every symlink it may go through is known


def _check_symlink(member: Member, members: Dict[str, Member]) -> None:
    target = str(member.target)
    if target.startswith("/"):
        raise CacheCorrupt(f"symlink {member.path!r} points to the absolute path {target!r}")
    if not target or _escapes(member.path, target, members):
        raise CacheCorrupt(f"symlink {member.path!r} -> {target!r} resolves outside the destination")


def _escapes(link: str, target: str, members: Dict[str, Member]) -> bool:
    """Whether resolving ``target`` from ``link``'s folder, following the tree's own symlinks, leaves the tree.

    Lexical normalisation is not enough: with ``a -> b/c`` and ``b/c -> ..``, ``x -> a/..`` looks like
    ``x -> .`` but is the destination's parent.
    """
    stack = link.split("/")[:-1]
    todo = target.split("/")
    hops = 0
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


def same_member(got: Member, want: Member) -> None:
    """A tar member must be the manifest's member: same type, mode, size and symlink target."""
    for field in ("type", "mode", "size", "target"):
        if getattr(got, field) != getattr(want, field):
            raise CacheCorrupt(f"member {got.path!r} differs from the manifest in its {field}: "
                               f"{getattr(got, field)!r} != {getattr(want, field)!r}")


def extract_checked(tar: tarfile.TarFile, root: str, expected: Sequence[Member]) -> None:
    """Create the members of a tar stream under ``root``, in one pass (one decompression of the blob).

    ``expected`` is the manifest's member list, already checked by :func:`check_members` (no absolute path,
    no ``..``, no link out of the tree, nothing through a symlink).  Each header is held against it BEFORE
    its member is written: a member the manifest does not name, or names differently, a duplicate, or one
    that comes before its folder is refused, so nothing unchecked is ever created; members are created
    exclusively and never through a symlink, each file hashed while it is written and held against the
manifest's sha256.  Every manifest member must have come.
    """
    want = {m.path: m for m in expected}
    done: Set[str] = set()
    for info in tar:
        got = member_of(info)
        member = want.get(got.path)
        if member is None:
            raise CacheCorrupt(f"member {got.path!r} is not in the manifest")
        if got.path in done:
            raise CacheCorrupt(f"member {got.path!r} appears twice")
        same_member(got, member)
        parent = posixpath.dirname(got.path)
        if parent and parent not in done:
            raise CacheCorrupt(f"member {got.path!r} comes before its folder {parent!r}")
        path = os.path.join(root, *info.name.split("/"))
        if info.type == tarfile.DIRTYPE:
            os.mkdir(path, 0o700)
        elif info.type == tarfile.SYMTYPE:
            os.symlink(info.linkname, path)
        else:
            _write_file(tar, info, path, member)
        done.add(got.path)
    missing = [path for path in want if path not in done]
    if missing:
        raise CacheCorrupt(f"manifest member {missing[0]!r} is missing from the blob")


def _write_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str, want: Member) -> None:
    """Write one member's bytes, hashing them on the way: nothing is read back afterwards."""
    src = tar.extractfile(info)
    if src is None:
        raise CacheCorrupt(f"member {info.name!r} has no data")
    digest = hashlib.sha256()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with src, os.fdopen(os.open(path, flags, 0o600), "wb") as out:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            out.write(chunk)
        # The archive's mtime, not now: a .pyc is valid only for its source's recorded mtime.  Flushed first:
        # bytes still in the buffer would be written at close, after the utime, and set the mtime to now.
        out.flush()
        os.utime(out.fileno(), (info.mtime, info.mtime))
    got = digest.hexdigest()
    if want.sha256 is not None and got != want.sha256:
        raise CacheCorrupt(f"extracted file {info.name!r} sha256 mismatch: expected {want.sha256[:12]}.. "
                           f"got {got[:12]}..")
