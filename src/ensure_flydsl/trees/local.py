"""The store's local tier: each tree on this host kept once, read-only and sealed, and copied into each root that
uses it (by reflink where the file system can: the same blocks), so no root's edit reaches another (docs/store.md)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import shutil
import stat
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl import layout
from ensure_flydsl.result import LINK_MODES
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import Record, checked
from ensure_flydsl.support.files import (
    atomic_write,
    atomic_write_json,
    file_path_problem,
    held_lock,
    read_regular,
    remove_tree,
    rename_into_place,
)
from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import (
    HEX64,
    CacheEntry,
    Member,
    Seal,
    check_members,
    check_tree,
    manifest_bytes,
    new_entry,
    parse_manifest,
    prune_order,
    stat_seal,
)

REFLINK, COPY = LINK_MODES
FICLONE = 0x40049409  # _IOW(0x94, 9, int): Linux's clone of a whole file (btrfs, XFS, bcachefs)
# What a file system says when it cannot reflink between two paths.
_REFUSED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV, errno.ENOSYS, errno.EPERM, errno.EBADF}
STAGING_PREFIX = ".staging-"
KEEP_PROBES = 16  # interpreters remembered per tree (the newest)


def foreign(st: os.stat_result) -> Optional[str]:
    """Why a part of the store with this stat could change what this user runs: another user owns it, or anyone
    may write it (the owner counts, as in git's safe.directory; a sticky folder such as /tmp protects its own)."""
    if st.st_uid != os.geteuid():
        try:
            name = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            name = "no known user"
        return f"it belongs to uid {st.st_uid} ({name}), not to this user (uid {os.geteuid()})"
    if st.st_mode & stat.S_IWOTH and not stat.S_ISLNK(st.st_mode) and not (
            stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        return "any user may write it"
    return None


def store_problem(path: str) -> Optional[str]:
    """Why ``path`` cannot be this user's store (one rule for every command, read-only); None if it can or is absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect it: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return "it is a file, not a folder"
    why = foreign(st)
    if why is not None:
        return f"{why}: another user's store could change what runs here (use a store of your own)"
    if not os.access(path, os.W_OK | os.X_OK):
        return "this user cannot write in it"
    lock = layout.store_lock(path)
    problem = file_path_problem(lock, symlink_ok=False)
    if problem is not None:
        return f"its lock {lock}: {problem}"
    for part in (lock, layout.store_trees_dir(path), layout.store_git_dir(path)):
        with contextlib.suppress(FileNotFoundError):
            why = foreign(os.lstat(part))
            if why is not None:
                return f"{part}: {why}"
    return None


class Placer:
    """Copies files, by reflink (a copy-on-write clone) while the file system takes it."""

    def __init__(self) -> None:
        self.mode: Optional[str] = None  # the way of the last file placed: copy once a reflink was refused

    def place(self, src: str, dst: str) -> None:
        """``src`` at the new ``dst``, its mtime kept (a .pyc records its source's)."""
        if self.mode != COPY:
            try:
                with open(src, "rb") as source, open(dst, "xb") as out:
                    try:
                        fcntl.ioctl(out.fileno(), FICLONE, source.fileno())
                    except BaseException:
                        os.unlink(dst)  # the half-made clone this call created, nothing else
                        raise
                self.mode = REFLINK
            except OSError as exc:
                if exc.errno not in _REFUSED:
                    raise
                self.mode = COPY
        if self.mode == COPY:
            shutil.copyfile(src, dst, follow_symlinks=False)
        st = os.stat(src)
        os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def _tree_files(value: object) -> Optional[Dict[str, str]]:
    """Each module's file: a path inside the tree (relative, normal, no ``..``, no NUL)."""
    found = fields.text_map(value)
    inside = (not f.startswith("/") and "\0" not in f and "\\" not in f and
              all(part not in ("", ".", "..") for part in f.split("/")) for f in (found or {}).values())
    return found if found is not None and all(inside) else None


@dataclass(frozen=True)
class Passed(Record):
    """A probe a stored tree passed: flydsl's version and each module's file relative to the root."""

    version: str = checked(fields.short_text)
    files: Dict[str, str] = checked(_tree_files)


@dataclass
class HostStore:
    path: str
    lock_timeout: Optional[float] = None
    say: Callable[[str], None] = lambda _: None
    warnings: List[str] = field(default_factory=list)  # lines about the store for the caller to say

    @classmethod
    def open(cls, path: str, *, lock_timeout: Optional[float] = None,
             say: Callable[[str], None] = lambda _: None) -> "HostStore":
        """The tier at ``path``, its folders made if missing; OSError when it is not this user's to use."""
        problem = store_problem(path)
        if problem is None:
            for folder in (path, layout.store_trees_dir(path)):
                os.makedirs(folder, mode=0o755, exist_ok=True)
            problem = store_problem(path)
        if problem is not None:
            raise PermissionError(problem)
        return cls(path, lock_timeout=lock_timeout, say=say)

    def locked(self) -> "contextlib.AbstractContextManager[None]":
        """Held to add, remove or record (a reader copies without it: a tree is renamed away whole before it is
        removed, so a copy under way fails, never takes half); LockBusy after ``lock_timeout``."""
        return held_lock(layout.store_lock(self.path), timeout=self.lock_timeout, say=self.say,
                         what="the host store's lock")

    def tree_dir(self, key: str) -> str:
        return layout.store_tree_dir(self.path, key)

    def _made(self, name: str) -> Optional[str]:
        """Why trees/NAME is not a tree of ours (a key's folder holding only what the tier writes), or None."""
        if not HEX64.match(name):
            return "its name is no tree's key"
        folder = self.tree_dir(name)
        try:
            st = os.lstat(folder)
            held = set(os.listdir(folder)) if stat.S_ISDIR(st.st_mode) else None
        except OSError as exc:
            return f"cannot read it: {exc.strerror}"
        if held is None:
            return "it is not a folder"
        odd = sorted(name for name in held if name not in TREE_PARTS and not (
            name.startswith(tuple(f".{part}." for part in TREE_PARTS)) and name.endswith(".tmp")))  # a torn write
        return foreign(st) or (f"it holds {odd[0]!r}, which the store never writes there" if odd else None)

    def _read(self, path: str) -> Optional[bytes]:
        """A file of the tier, when it is this user's alone."""
        try:
            if foreign(os.lstat(path)) is not None:
                return None
        except OSError:
            return None
        return read_regular(path)

    def _field(self, path: str, name: str) -> object:
        """One field of a JSON file of the tier; None when it cannot be read."""
        raw = self._read(path)
        try:
            return json.loads(raw)[name] if raw is not None else None
        except (ValueError, TypeError, KeyError):
            return None

    def lookup(self, key: str) -> Tuple[Optional[CacheEntry], str]:
        """The manifest of ``key``; None and why when there is none this tier wrote (never linked, pruned first)."""
        if not os.path.lexists(self.tree_dir(key)):
            return None, NOT_STORED
        why = self._made(key)
        if why is not None:
            return None, why
        raw = self._read(layout.store_manifest(self.tree_dir(key)))
        if raw is None:
            return None, "no readable manifest of this user's"
        try:
            entry = parse_manifest(raw, unpacked=True)
            check_members(entry.members)
        except (ValueError, CacheCorrupt) as exc:
            return None, f"its manifest {exc}"
        if entry.key != key:
            return None, f"its key is {entry.key!r}, not its folder's {key!r}"
        return entry, ""

    def check(self, entry: CacheEntry, *, full: bool = False) -> None:
        """CacheCorrupt unless the stored files are this user's and the manifest's members; the seal holds each file's
        ctime, which no one can put back, so an edit in place is seen whatever it does to the mtime."""
        files = layout.store_files(self.tree_dir(entry.key))
        for member in ("", *(m.path for m in entry.members)):
            with contextlib.suppress(FileNotFoundError):  # a missing member is check_tree's to say
                why = foreign(os.lstat(os.path.join(files, member)))
                if why is not None:
                    raise CacheCorrupt(f"{member or 'files/'}: {why}")
        seal = self._field(layout.store_seal(self.tree_dir(entry.key)), "files")  # any value but a stat's: hashed
        check_tree(files, entry.members, seal if isinstance(seal, dict) else {}, full=full)

    def put(self, key: str, tree_fields: Mapping[str, object], folder: str, members: Sequence[Member], *,
            how: str, signed_by: Sequence[str], refuses: Callable[[CacheEntry], Optional[str]],
            placer: Placer) -> Tuple[CacheEntry, bool]:
        """A copy of ``folder``'s tree as the tier's ``key``, staged and renamed whole; whether it was added (a
        tree already there stays unless ``refuses`` says why this run would not take it)."""
        check_members(members)
        with self.locked():
            found, _ = self.lookup(key)
            if found is not None and refuses(found) is None:
                return found, False
            left = self.remove(key)
            if left is not None:
                raise CacheCorrupt(f"{self.tree_dir(key)} is in the way and is not the store's ({left})")
            staging = os.path.join(layout.store_trees_dir(self.path),
                                   f"{STAGING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}")
            entry = new_entry("tree", key, tree_fields, members, size=sum(m.size for m in members), how=how,
                              signed_by=signed_by)
            try:
                seal = _place_tree(folder, layout.store_files(staging), members, placer, store_side=True)
                atomic_write_json(layout.store_seal(staging), {"files": seal})
                atomic_write(layout.store_manifest(staging), manifest_bytes(entry))
                rename_into_place(staging, self.tree_dir(key))
            except BaseException:
                remove_tree(staging)
                raise
        return entry, True

    def get(self, entry: CacheEntry, dest: str, placer: Placer) -> None:
        """A copy of the tree of ``entry`` at ``dest`` (which must not exist): the root's own files."""
        _place_tree(layout.store_files(self.tree_dir(entry.key)), dest, entry.members, placer, store_side=False)
        with contextlib.suppress(OSError):
            os.utime(self.tree_dir(entry.key))  # last used: prune removes the longest unused first

    def remove(self, key: str) -> Optional[str]:
        """The tree ``key``, gone at once (renamed away, then deleted): no root copies half of it; a folder there
        that is not a tree of ours stays, and why is returned."""
        folder = self.tree_dir(key)
        if not os.path.lexists(folder):
            return None
        why = self._made(key)
        if why is not None:
            return why
        gone = os.path.join(layout.store_trees_dir(self.path), f"{STAGING_PREFIX}gone-{os.urandom(4).hex()}")
        rename_into_place(folder, gone)
        remove_tree(gone)
        return None

    def _probes(self, key: str) -> List[Dict[str, object]]:
        found = self._field(layout.store_probed(self.tree_dir(key)), "passed")
        return [r for r in found if isinstance(r, dict)] if isinstance(found, list) else []

    def passed(self, key: str, fingerprint: Mapping[str, object], modules: Sequence[str]) -> Optional[Passed]:
        """The probe the tree passed with an interpreter of ``fingerprint`` importing ``modules``, if any."""
        mine = (record for record in self._probes(key) if _same(record.get("fingerprint"), fingerprint))
        found = Passed.from_json(next(mine, None))  # the interpreter's record, if any (None reads as none)
        return found if found is not None and sorted(found.files) == sorted(modules) else None

    def remember(self, key: str, fingerprint: Mapping[str, object], version: str, files: Dict[str, str]) -> None:
        """Record a pass (the caller holds the exclusive lock)."""
        kept = [r for r in self._probes(key) if not _same(r.get("fingerprint"), fingerprint)][-(KEEP_PROBES - 1):]
        kept.append({"fingerprint": dict(fingerprint), "version": version, "files": files})
        atomic_write_json(layout.store_probed(self.tree_dir(key)), {"passed": kept})

    def entries(self) -> List[CacheEntry]:
        """Every tree this tool made, with when it was last ``used`` and, if it cannot be used, its ``problem``."""
        try:
            names = sorted(os.listdir(layout.store_trees_dir(self.path)))
        except OSError:
            return []
        found = []
        for key in (name for name in names if self._made(name) is None):
            entry, why = self.lookup(key)
            try:
                used = os.stat(self.tree_dir(key)).st_mtime
            except OSError:
                continue
            found.append(replace(entry or CacheEntry(kind="tree", key=key, problem=why), used=used))
        return found

    def prune(self, max_bytes: int) -> List[CacheEntry]:
        """Trees removed (damaged, then longest unused) down to ``max_bytes``, and every staging folder (under the
        lock, a killed run's); what is under trees/ and not this tool's is said in ``warnings``."""
        with self.locked():
            trees = layout.store_trees_dir(self.path)
            for name in sorted(os.listdir(trees)) if os.path.isdir(trees) else []:
                full = os.path.join(trees, name)
                why = self._made(name)
                if name.startswith(STAGING_PREFIX) and foreign(os.lstat(full)) is None:
                    remove_tree(full)
                elif why is not None:
                    self.warnings.append(f"left {full} as it is: {why}, so this tool did not make it")
            removed = prune_order(self.entries(), max_bytes, lambda staying: sum(t.size for t in staying))
            for tree in removed:
                self.remove(tree.key)
        return removed


NOT_STORED = "not in the store"
TREE_PARTS = frozenset(os.path.basename(part("")) for part in (layout.store_manifest, layout.store_seal,
                                                               layout.store_probed, layout.store_files))


def _place_tree(src: str, dest: str, members: Sequence[Member], placer: Placer, *, store_side: bool) -> Seal:
    """Every member from ``src`` at ``dest``; the files' (inode, size, mtime, ctime) at ``dest``."""
    os.makedirs(dest)
    seal: Seal = {}
    for member in members:
        there = os.path.join(dest, member.path)
        if member.type == "dir":
            os.mkdir(there)
        elif member.type == "symlink":
            os.symlink(str(member.target), there)
        else:
            placer.place(os.path.join(src, member.path), there)
            mode = 0o755 if member.mode & 0o111 else 0o644
            # the store's copy is never written in place; the root's own copy its owner may write
            os.chmod(there, mode & ~0o222 if store_side else mode)
            seal[member.path] = stat_seal(os.lstat(there))
    return seal


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

