"""The host store's trees: ``trees/<key>/`` holds a tree's files (read-only), its manifest (each file's sha256)
and its seal (each stored file's inode, size and mtime as the store left it).  A tree is added whole or not at
all (staged in ``trees/.staging-*``, then renamed), checked before every link (a file whose stat differs from
its seal is hashed; under ``full`` every file is) and never linked when a file does not match its manifest.

Adding and pruning hold the store's lock exclusively, linking holds it shared: a tree is never removed while
a root links it, nor half-added when another root looks."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from typing import Dict, Iterator, List, Optional, Tuple

from ensure_flydsl import layout
from ensure_flydsl.host_store.link import Linker
from ensure_flydsl.host_store.manifest import Entry, Manifest, hash_file, parse
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write, atomic_write_json, read_json, remove_tree, rename_into_place

READ_ONLY_FILE, READ_ONLY_PROGRAM = 0o444, 0o555
STAGING_PREFIX = ".staging-"
Seal = Dict[str, Tuple[int, int, int]]  # path -> (inode, size, mtime_ns)


class StoreProblem(Exception):
    """A stored tree that must not be linked: why, in words."""


class HostStore:
    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def open(cls, path: str) -> "HostStore":
        """The store at ``path``, its folders made if missing (OSError when they cannot be)."""
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
            names = sorted(os.listdir(layout.store_trees_dir(self.path)))
        except OSError:
            return []
        return [n for n in names if not n.startswith(".")]

    def manifest(self, key: str) -> Tuple[Optional[Manifest], str]:
        """The manifest of ``key`` (None and why when there is no such tree, or it means nothing the store writes)."""
        folder = self.tree_dir(key)
        if not os.path.isdir(folder):
            return None, "not in the store"
        return parse(read_json(layout.store_manifest(folder)), key)

    def seal(self, key: str) -> Seal:
        data = read_json(layout.store_seal(self.tree_dir(key)))
        raw = data.get("files") if data is not None else None
        seal: Seal = {}
        if isinstance(raw, dict):
            for path, value in raw.items():
                if isinstance(value, list) and len(value) == 3 and all(fields.integer(v) is not None for v in value):
                    seal[str(path)] = (int(value[0]), int(value[1]), int(value[2]))
        return seal

    def check(self, manifest: Manifest, *, full: bool = False) -> None:
        """Raise StoreProblem unless every entry of ``manifest`` is in the tree's files as listed: each file a
        regular file of its size whose stat is its seal's, or (a stat that differs, or ``full``) its sha256."""
        files, seal = layout.store_files(self.tree_dir(manifest.key)), self.seal(manifest.key)
        for entry in manifest.entries:
            check_entry(os.path.join(files, entry.path), entry, seal, full)

    def add(self, key: str, folder: str, *, how: str, commit: str, abi: str, root: str, linker: Linker,
            entries: List[Entry], root_specific: Optional[str]) -> Tuple[Manifest, bool]:
        """``folder``'s tree (scanned as ``entries``) as the store's ``key``, placed by ``linker`` (a hardlink
        makes the root's files the store's, read-only), staged and renamed whole; whether it was added (a tree
        already there is kept, and ``folder``'s files stay its own)."""
        with self.locked(exclusive=True):
            found, _ = self.manifest(key)
            if found is not None:
                return found, False
            remove_tree(self.tree_dir(key))  # something that is no tree of ours by its manifest
            name = f"{STAGING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
            staging = os.path.join(layout.store_trees_dir(self.path), name)
            try:
                manifest = Manifest(key=key,
                                    how=how,
                                    commit=commit,
                                    abi=abi,
                                    entries=entries,
                                    root_specific=root_specific)
                seal = _place_tree(folder, layout.store_files(staging), entries, linker, store_side=True)
                atomic_write_json(layout.store_seal(staging), {"files": {p: list(v) for p, v in seal.items()}})
                atomic_write(layout.store_manifest(staging), json.dumps(manifest.to_json()).encode())
                rename_into_place(staging, self.tree_dir(key))
            except BaseException:
                _remove_staging(staging)
                raise
        return manifest, True

    def link(self, manifest: Manifest, dest: str, linker: Linker) -> None:
        """The tree of ``manifest`` at ``dest`` (which must not exist), each file placed by ``linker``."""
        _place_tree(layout.store_files(self.tree_dir(manifest.key)), dest, manifest.entries, linker,
                    store_side=False)
        with contextlib.suppress(OSError):
            os.utime(self.tree_dir(manifest.key))  # last used: prune removes the longest unused first

    def remove(self, key: str) -> None:
        """The tree ``key``, gone at once (renamed away, then deleted): no root can link half of it."""
        folder = self.tree_dir(key)
        if not os.path.lexists(folder):
            return
        gone = os.path.join(layout.store_trees_dir(self.path), f"{STAGING_PREFIX}gone-{os.urandom(4).hex()}")
        rename_into_place(folder, gone)
        _remove_staging(gone)

    def clear_staging(self, older_than: float = 3600.0) -> List[str]:
        """Staging folders a killed run left (older than ``older_than`` seconds; under the exclusive lock)."""
        removed = []
        trees = layout.store_trees_dir(self.path)
        for name in os.listdir(trees) if os.path.isdir(trees) else []:
            full = os.path.join(trees, name)
            if name.startswith(STAGING_PREFIX) and time.time() - os.lstat(full).st_mtime > older_than:
                _remove_staging(full)
                removed.append(name)
        return removed


def check_entry(path: str, entry: Entry, seal: Seal, full: bool) -> None:
    try:
        st = os.lstat(path)
    except OSError:
        raise StoreProblem(f"{entry.path} is missing") from None
    if entry.kind == "dir":
        if not stat.S_ISDIR(st.st_mode):
            raise StoreProblem(f"{entry.path} is not a folder")
    elif entry.kind == "link":
        if not stat.S_ISLNK(st.st_mode) or os.readlink(path) != entry.target:
            raise StoreProblem(f"{entry.path} is not the link to {entry.target}")
    else:
        if not stat.S_ISREG(st.st_mode) or st.st_size != entry.size:
            raise StoreProblem(f"{entry.path} is not a file of {entry.size} bytes")
        if full or seal.get(entry.path) != (st.st_ino, st.st_size, st.st_mtime_ns):
            if hash_file(path)[0] != entry.sha256:
                raise StoreProblem(f"{entry.path} does not match its sha256 in the manifest")


def _place_tree(src: str, dest: str, entries: List[Entry], linker: Linker, *, store_side: bool) -> Seal:
    """Every entry from ``src`` at ``dest``; the files' (inode, size, mtime) at ``dest``."""
    os.makedirs(dest)
    seal: Seal = {}
    for entry in entries:
        there = os.path.join(dest, entry.path)
        if entry.kind == "dir":
            os.mkdir(there)
        elif entry.kind == "link":
            os.symlink(entry.target, there)
        else:
            mode = linker.place(os.path.join(src, entry.path), there)
            if store_side:  # the store's copy (and a root's hardlink to it) is never written in place
                os.chmod(there, READ_ONLY_PROGRAM if entry.executable else READ_ONLY_FILE)
            elif mode != "hardlink":  # the root's own copy: its owner may write it
                os.chmod(there, 0o755 if entry.executable else 0o644)
            st = os.lstat(there)
            seal[entry.path] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return seal


def _remove_staging(folder: str) -> None:
    """A staging (or removed) tree: its folders made writable first (the store's folders stay writable; its
    files are read-only, which does not stop their removal)."""
    remove_tree(folder)
