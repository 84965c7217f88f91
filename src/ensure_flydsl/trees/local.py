"""The store's local tier: each tree on this host kept once, unpacked and sealed, linked into each root that uses it
(reflink, hardlink or copy); added whole under the tier's exclusive lock, linked under its shared one, in use while
the tier's reference and the root's own record agree (docs/store.md)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import socket
import time
from dataclasses import asdict, dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl import layout
from ensure_flydsl.result import LINK_MODES
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import Record, checked
from ensure_flydsl.support.files import (
    atomic_write,
    atomic_write_json,
    read_json,
    read_regular,
    remove_file,
    remove_tree,
    rename_into_place,
)
from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import (
    CacheEntry,
    Member,
    Seal,
    check_members,
    check_tree,
    manifest_bytes,
    parse_manifest,
    prune_order,
)
from ensure_flydsl.version import __version__

REFLINK, HARDLINK, COPY = LINK_MODES
FICLONE = 0x40049409  # _IOW(0x94, 9, int): Linux's clone of a whole file (btrfs, XFS, bcachefs)
# What a file system says when it cannot reflink (or link) between two paths.
_REFUSED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV, errno.ENOSYS, errno.EPERM, errno.EMLINK,
            errno.EBADF}
READ_ONLY_FILE, READ_ONLY_PROGRAM = 0o444, 0o555
STAGING_PREFIX = ".staging-"
STAGING_AGE_S = 3600.0  # a staging folder older than this is a killed run's
KEEP_PROBES = 16  # interpreters remembered per tree (the newest)


class Linker:
    """Places files by the first of reflink, hardlink, copy that works; a file the kept way refuses falls on."""

    def __init__(self) -> None:
        self.mode: Optional[str] = None
        self.cross_device = False  # a hardlink failed with EXDEV: two file systems

    def place(self, src: str, dst: str) -> str:
        """``src`` at the new ``dst``, its mtime kept (a .pyc records its source's); the way used."""
        for mode in LINK_MODES[LINK_MODES.index(self.mode or REFLINK):]:
            try:
                if mode == REFLINK:
                    _reflink(src, dst)
                elif mode == HARDLINK:
                    os.link(src, dst, follow_symlinks=False)
                else:
                    shutil.copyfile(src, dst, follow_symlinks=False)
            except OSError as exc:
                if mode == COPY or exc.errno not in _REFUSED:
                    raise
                self.cross_device = self.cross_device or (mode == HARDLINK and exc.errno == errno.EXDEV)
                continue
            if mode != HARDLINK:  # a hardlink is the same file: its mode and mtime are the store's
                st = os.stat(src)
                os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
            if self.mode is None or LINK_MODES.index(mode) > LINK_MODES.index(self.mode):
                self.mode = mode
            return mode
        raise AssertionError("a copy either works or raises")


def _reflink(src: str, dst: str) -> None:
    with open(src, "rb") as source:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.ioctl(fd, FICLONE, source.fileno())
        except BaseException:
            os.close(fd)
            os.unlink(dst)
            raise
        os.close(fd)


@dataclass(frozen=True)
class TreeInfo:
    """A tree of the tier as ``store list`` shows it."""

    key: str
    size: int
    files: int
    how: Optional[str]
    commit: Optional[str]
    abi: Optional[str]
    used_by: List[str]
    last_used: float
    problem: str = ""

    def to_json(self) -> Dict[str, object]:
        return {**asdict(self), "last_used": round(self.last_used, 3), "problem": self.problem or None}


def _tree_files(value: object) -> Optional[Dict[str, str]]:
    found = fields.text_map(value)
    return found if found is not None and all(_inside(f) for f in found.values()) else None


@dataclass(frozen=True)
class Passed(Record):
    """A probe a stored tree passed: flydsl's version and each module's file relative to the root."""

    version: str = checked(fields.short_text)
    files: Dict[str, str] = checked(_tree_files)


class HostStore:
    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def open(cls, path: str) -> "HostStore":
        """The tier at ``path``, its folders made if missing (OSError when they cannot be)."""
        for folder in (path, layout.store_trees_dir(path), layout.store_refs_dir(path)):
            os.makedirs(folder, exist_ok=True)
        with open(layout.store_lock(path), "a"):
            pass
        return cls(path)

    @contextlib.contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        fd = os.open(layout.store_lock(self.path), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    def tree_dir(self, key: str) -> str:
        return layout.store_tree_dir(self.path, key)

    def keys(self) -> List[str]:
        try:
            return [n for n in sorted(os.listdir(layout.store_trees_dir(self.path))) if not n.startswith(".")]
        except OSError:
            return []

    def lookup(self, key: str) -> Tuple[Optional[CacheEntry], str]:
        """The manifest of ``key``; None and why when there is none this tier wrote (never linked, pruned first)."""
        folder = self.tree_dir(key)
        if not os.path.isdir(folder):
            return None, "not in the store"
        raw = read_regular(layout.store_manifest(folder))
        if raw is None:
            return None, "no readable manifest"
        try:
            entry = parse_manifest(raw, unpacked=True)
            check_members(entry.members)
        except (ValueError, CacheCorrupt) as exc:
            return None, f"its manifest {exc}"
        if entry.key != key:
            return None, f"its key is {entry.key!r}, not its folder's {key!r}"
        return entry, ""

    def seal(self, key: str) -> Seal:
        data = read_json(layout.store_seal(self.tree_dir(key)))
        raw = data.get("files") if data is not None else None
        seal: Seal = {}
        for path, value in raw.items() if isinstance(raw, dict) else ():
            if isinstance(value, list) and len(value) == 3 and all(fields.integer(v) is not None for v in value):
                seal[str(path)] = (int(value[0]), int(value[1]), int(value[2]))
        return seal

    def check(self, entry: CacheEntry, *, full: bool = False, at: Optional[str] = None, sealed: bool = True) -> None:
        """CacheCorrupt unless the files at ``at`` (the tree's own) are its members (hashed when ``full`` or not
        as ``sealed``)."""
        files = at or layout.store_files(self.tree_dir(entry.key))
        check_tree(files, entry.members, self.seal(entry.key) if sealed else {}, full=full)

    def put(self, key: str, tree_fields: Mapping[str, object], folder: str, members: Sequence[Member], *,
            how: str, linker: Linker) -> Tuple[CacheEntry, bool]:
        """``folder``'s tree as the tier's ``key``, staged and renamed whole; whether it was added."""
        check_members(members)
        with self.locked(exclusive=True):
            found, _ = self.lookup(key)
            if found is not None:
                return found, False
            remove_tree(self.tree_dir(key))  # no tree of ours, by its manifest
            staging = os.path.join(layout.store_trees_dir(self.path),
                                   f"{STAGING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
            entry = CacheEntry(kind="tree", key=key, blob="", size=sum(m.size for m in members), created=time.time(),
                               fields=dict(tree_fields), files=sum(1 for m in members if m.type == "file"),
                               members=tuple(members), host=socket.gethostname(), tool=f"ensure-flydsl {__version__}",
                               how=how)
            try:
                seal = _place_tree(folder, layout.store_files(staging), members, linker, store_side=True)
                atomic_write_json(layout.store_seal(staging), {"files": {p: list(v) for p, v in seal.items()}})
                atomic_write(layout.store_manifest(staging), manifest_bytes(entry))
                rename_into_place(staging, self.tree_dir(key))
            except BaseException:
                remove_tree(staging)
                raise
        return entry, True

    def link(self, entry: CacheEntry, dest: str, linker: Linker) -> None:
        """The tree of ``entry`` at ``dest`` (which must not exist), each file placed by ``linker``."""
        _place_tree(layout.store_files(self.tree_dir(entry.key)), dest, entry.members, linker, store_side=False)
        with contextlib.suppress(OSError):
            os.utime(self.tree_dir(entry.key))  # last used: prune removes the longest unused first

    def remove(self, key: str) -> None:
        """The tree ``key``, gone at once (renamed away, then deleted): no root can link half of it."""
        folder = self.tree_dir(key)
        if os.path.lexists(folder):
            gone = os.path.join(layout.store_trees_dir(self.path), f"{STAGING_PREFIX}gone-{os.urandom(4).hex()}")
            rename_into_place(folder, gone)
            remove_tree(gone)

    def _probes(self, key: str) -> List[Dict[str, object]]:
        data = read_json(layout.store_probed(self.tree_dir(key)))
        raw = data.get("passed") if data is not None else None
        return [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []

    def passed(self, key: str, fingerprint: Mapping[str, object], modules: Sequence[str]) -> Optional[Passed]:
        """The probe the tree passed with an interpreter of ``fingerprint`` importing ``modules``, if any."""
        for record in self._probes(key):
            if not _same(record.get("fingerprint"), fingerprint):
                continue
            found = Passed.from_json(record)
            return found if found is not None and sorted(found.files) == sorted(modules) else None
        return None

    def remember(self, key: str, fingerprint: Mapping[str, object], version: str, files: Dict[str, str]) -> None:
        """Record a pass (the caller holds the exclusive lock)."""
        kept = [r for r in self._probes(key) if not _same(r.get("fingerprint"), fingerprint)][-(KEEP_PROBES - 1):]
        kept.append({"fingerprint": dict(fingerprint), "version": version, "files": files})
        atomic_write_json(layout.store_probed(self.tree_dir(key)), {"passed": kept})

    def hold(self, root: str, key: str, link_mode: str) -> None:
        """``root`` uses the tree ``key`` (its own record first: a reference alone holds nothing)."""
        atomic_write_json(layout.root_store_record(root), {"store": self.path, "tree": key, "link_mode": link_mode})
        name = hashlib.sha256(os.fsencode(root)).hexdigest()[:32] + ".json"
        atomic_write_json(os.path.join(layout.store_refs_dir(self.path), name), {"root": root, "tree": key})

    def references(self) -> List[Tuple[str, Optional[str], Optional[str]]]:
        """(reference file, root, tree) of every reference (root and tree None when unreadable)."""
        folder = layout.store_refs_dir(self.path)
        found = []
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            data = read_json(os.path.join(folder, name)) if name.endswith(".json") else None
            found.append((os.path.join(folder, name), fields.absolute_path(data.get("root")) if data else None,
                          fields.text(data.get("tree")) if data else None))
        return found

    def in_use(self) -> Dict[str, List[str]]:
        """Tree key -> the roots that use it now (each reference checked against the root's own record)."""
        used: Dict[str, List[str]] = {}
        real = os.path.realpath(self.path)
        for _, root, tree in self.references():
            record = root_record(root) if root is not None and tree is not None else None
            if record is not None and os.path.realpath(record[0]) == real and record[1] == tree:
                used.setdefault(tree, []).append(str(root))
        return used

    def list(self) -> List[TreeInfo]:
        used, found = self.in_use(), []
        for key in self.keys():
            entry, why = self.lookup(key)
            try:
                last = os.stat(self.tree_dir(key)).st_mtime
            except OSError:
                continue
            made = entry.fields if entry else {}
            found.append(TreeInfo(key=key, size=entry.size if entry else 0, files=entry.files if entry else 0,
                                  how=entry.how if entry else None, commit=fields.text(made.get("commit")),
                                  abi=fields.text(made.get("abi")), used_by=used.get(key, []), last_used=last,
                                  problem=why))
        return found

    def prune(self, max_size: int) -> List[TreeInfo]:
        """Unused trees removed (broken, then longest unused) down to ``max_size`` bytes, with stale refs."""
        with self.locked(exclusive=True):
            used = self.in_use()
            for path, root, key in self.references():
                if root is None or key is None or root not in used.get(key, []):
                    remove_file(path)  # it holds nothing: its root is gone or moved on
            trees = layout.store_trees_dir(self.path)
            for name in os.listdir(trees) if os.path.isdir(trees) else []:
                full = os.path.join(trees, name)
                if name.startswith(STAGING_PREFIX) and time.time() - os.lstat(full).st_mtime > STAGING_AGE_S:
                    remove_tree(full)
            removed = prune_order(self.list(), max_size, lambda staying: sum(t.size for t in staying),
                                  first=lambda t: t.last_used, kept=lambda t: bool(t.used_by),
                                  broken=lambda t: bool(t.problem))
            for tree in removed:
                self.remove(tree.key)
        return removed


def release(root: str) -> None:
    """The root's tree changes: its own record goes (its reference then holds nothing)."""
    remove_file(layout.root_store_record(root))


def root_record(root: str) -> Optional[Tuple[str, str, str]]:
    """(tier, tree key, link mode) the root says its tree is linked from, when the record means that."""
    data = read_json(layout.root_store_record(root))
    if data is None:
        return None
    store, key = fields.absolute_path(data.get("store")), fields.text(data.get("tree"))
    mode = fields.one_of(data.get("link_mode"), LINK_MODES)
    return None if store is None or key is None or mode is None else (store, key, mode)


def _place_tree(src: str, dest: str, members: Sequence[Member], linker: Linker, *, store_side: bool) -> Seal:
    """Every member from ``src`` at ``dest``; the files' (inode, size, mtime) at ``dest``."""
    os.makedirs(dest)
    seal: Seal = {}
    for member in members:
        there = os.path.join(dest, member.path)
        if member.type == "dir":
            os.mkdir(there)
        elif member.type == "symlink":
            os.symlink(str(member.target), there)
        else:
            mode = linker.place(os.path.join(src, member.path), there)
            program = bool(member.mode & 0o111)
            if store_side:  # the tier's copy (and a root's hardlink to it) is never written in place
                os.chmod(there, READ_ONLY_PROGRAM if program else READ_ONLY_FILE)
            elif mode != HARDLINK:  # the root's own copy: its owner may write it
                os.chmod(there, 0o755 if program else 0o644)
            st = os.lstat(there)
            seal[member.path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return seal


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _inside(path: str) -> bool:
    """A path inside a tree: relative, normal, no ``..``, no NUL, no empty part."""
    return bool(path) and "\0" not in path and not path.startswith("/") and "\\" not in path and all(
        part not in ("", ".", "..") for part in path.split("/"))
