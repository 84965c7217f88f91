"""The binary cache: finished trees and MLIR installs, shared between runs, containers and hosts.

Layout, content-addressed so that concurrent publishers can never leave a manifest naming another
publisher's bytes::

    <cache>/blobs/<sha256>.tar.gz          the artifact: a gzip'd tar of the folder, members relative,
                                           in sorted depth-first order, owners zeroed (same folder, same bytes)
    <cache>/entries/<kind>/<key>.json      the manifest: format, kind, key, key fields, blob sha256 and size,
                                           every member (path, type, mode, size, sha256 or symlink target),
                                           created, host, tool version
    <cache>/entries/<kind>/<key>.by/<NAME>.json
                                           the variant a host signing with NAME published (variants.py)
    <cache>/entries/<kind>/<key>.sig/<sha256 of the manifest>/<NAME>.sig
                                           a signature of the manifest's bytes by key NAME (signing.py)

``kind`` is ``tree`` (``build-fly/python_packages`` after a verified build) or ``mlir``; ``key`` is
:func:`cache_key` of the fields that determine the artifact (repository, commit, interpreter ABI,
platform, build settings).  Publishing uploads the blob (skipped when one of that name exists), then the
manifest, each atomically (see store.py): a reader sees an entry only once its manifest exists, and
its blob is complete by then.  A publish never replaces a manifest (variants.py): of two publishers of
one key the first one's manifest stays, and the second adds a variant when it signs with a key that the
first one's lacks.

Fetching trusts nothing it reads, and reads the blob once: straight from the store (a folder cache in
place, never copied; a URL as a stream), its bytes hashed and counted on their way into the decompressor.
The manifest's members are checked before a byte is read (no absolute path, no ``..``, no hard link or
device, no symlink leaving the tree, nothing written through a symlink, no duplicate); each tar header is
held against its manifest member before it is written, each file hashed while it is written; modes are
the manifest's without group/world write.  All of it lands in a staging folder beside the destination,
renamed into place only once the whole blob's size and sha256 matched.  Any failure leaves nothing
behind: :class:`CacheCorrupt` for a bad entry, :class:`CacheError` for I/O (a full disk).  Memory stays
at a few chunks whatever the blob's size.

A manifest that cannot be parsed counts as a miss: ``lookup`` returns None and notes why in
``Cache.warnings``; the next publish of that key replaces it, unless it is one of a newer format.

Locations: an absolute folder (plain os calls) or an fsspec URL (the README says how to point s3fs at an
S3-compatible server).
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import re
import shutil
import socket
import tarfile
import tempfile
import time
import zlib
from dataclasses import replace
from typing import IO, Dict, List, Mapping, Optional, Sequence, Set, Tuple, cast

from ensure_flydsl.binary_cache.archive import Member, check_members, extract_checked, pack, walk
from ensure_flydsl.binary_cache.blob_stream import BlobReader, Gunzip, check_tree, set_modes
from ensure_flydsl.binary_cache.manifest import (
    HEX64,
    MAX_MANIFEST_BYTES,
    CacheEntry,
    blob_path,
    cache_key,
    check_name,
    manifest_bytes,
    manifest_path,
    orphan_entry,
    parse_manifest,
)
from ensure_flydsl.binary_cache.signing import manifest_sha, stale_signatures
from ensure_flydsl.binary_cache.store import CacheCorrupt, CacheError, Store, StoredFile, open_store
from ensure_flydsl.binary_cache.variants import Published, place, read_manifest, read_variants
from ensure_flydsl.support import space
from ensure_flydsl.support.files import rename_into_place
from ensure_flydsl.support.keys import SecretKey
from ensure_flydsl.version import __version__

# An unreferenced blob younger than this may belong to a publisher that has not written its manifest yet.
ORPHAN_GRACE_S = 3600.0
# tarfile's reads from the decompressed stream: what it may hold beyond one request.  4 MiB rather than
# 256 KiB: fewer, larger joins, about 0.2 s less on the real 272 MiB tree; still a few MiB in memory.
_TAR_BUFFER = 4 << 20
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}

__all__ = ["Cache", "CacheCorrupt", "CacheEntry", "CacheError", "Member", "Published", "cache_key", "format_size",
           "open_cache", "parse_size"]


def parse_size(text: str) -> int:
    """``"500M"``, ``"2G"``, ``"1.5T"``, ``"1234"`` (also ``500MB``, ``2GiB``) to bytes; units are powers of 1024."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size: bytes, or a number with K, M, G or T (e.g. 500M, 2G, 1.5T)")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(value) or value >= 2**63:
        raise ValueError(f"{text!r} is too large a size")
    return int(value)


def format_size(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def open_cache(location: str) -> "Cache":
    """The cache at a folder path or an fsspec URL; CacheError when it cannot be used (missing extra...)."""
    return Cache(open_store(location))


class Cache:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.location = store.location
        # Manifests skipped as unreadable by lookup/entries, one line each, for the caller to report.
        self.warnings: List[str] = []
        self.down_reported = False  # the caller said once that the cache is down for this run
        self.said: Set[str] = set()  # lines the caller said about this cache in this run (each said once)

    @property
    def read_only(self) -> bool:
        """A folder this user may not write in: fetch from it, publish nothing, take no lease."""
        return self._store.read_only

    @property
    def down(self) -> Optional[str]:
        """Why the cache's remote cannot be used for the rest of this run (tried once, failed), or None."""
        return self._store.down

    @property
    def store(self) -> Store:
        """Where the bytes live (the build lease, binary_cache/lease.py, keeps its objects there too)."""
        return self._store

    # -- reading -------------------------------------------------------------------------------------
    def lookup(self, kind: str, key: str) -> Optional[CacheEntry]:
        """The entry first published under ``kind``/``key``, or None (a miss, or a manifest that cannot be
        parsed)."""
        return read_manifest(self._store, manifest_path(kind, key), kind, key, self.warnings)

    def variants(self, kind: str, key: str, prefer: Sequence[str] = ()) -> List[CacheEntry]:
        """The entries that hosts signing with other keys published for ``kind``/``key`` beside the first
        (variants.py), those named in ``prefer`` first."""
        return read_variants(self._store, kind, key, prefer, self.warnings)

    def entries(self) -> List[CacheEntry]:
        """Every readable entry, newest first."""
        return sorted((entry for _rel, entry in self._manifests()), key=lambda e: e.created, reverse=True)

    def _manifests(self) -> List[Tuple[str, CacheEntry]]:
        found: List[Tuple[str, CacheEntry]] = []
        for stored in self._store.list_files("entries"):
            if not stored.path.endswith(".json") or stored.path.rsplit("/", 1)[-1].startswith("."):
                continue
            try:
                data = self._store.read_bytes(stored.path, MAX_MANIFEST_BYTES)
                if data is None:
                    continue  # pruned meanwhile
                found.append((stored.path, parse_manifest(data, stored.path)))
            except CacheCorrupt as exc:
                self.warnings.append(f"ignored the manifest {stored.path} in {self.location}: {exc.reason}")
            except ValueError as exc:
                self.warnings.append(f"ignored the manifest {stored.path} in {self.location}: {exc}")
        return found

    def fetch(self, entry: CacheEntry, dest: str) -> None:
        """Verify ``entry`` and unpack it as the new folder ``dest``; on any failure nothing is left behind."""
        dest = os.path.abspath(dest)
        if os.path.lexists(dest):
            raise CacheError(f"cannot fetch into {dest}: it already exists (the caller removes it first)")
        members = entry.members or self._members_of(entry)
        check_members(members)  # a manifest naming ../x is refused before a byte is downloaded
        parent = os.path.dirname(dest)
        try:
            tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.fetch-", dir=parent)
        except OSError as exc:
            raise CacheError(f"cannot fetch into {dest}: {exc.strerror or exc}") from None
        try:
            tree = os.path.join(tmp, "tree")
            self._unpack(entry, members, tree)
            set_modes(tree, members)
            if os.path.lexists(dest):
                raise CacheError(f"cannot fetch into {dest}: something else created it meanwhile")
            rename_into_place(tree, dest)
        except CacheError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except OSError as exc:
            # ENOSPC, EDQUOT, EFBIG: a full disk must not leave half a tree that looks like a finished one.
            shutil.rmtree(tmp, ignore_errors=True)
            why = space.no_space(dest, exc.errno) if space.is_full(exc) else (exc.strerror or str(exc))
            raise CacheError(f"fetching {entry.kind} entry {entry.key[:12]} into {dest} failed: {why}; nothing "
                             "was left behind; free space on that file system or unset FLYDSL_CACHE") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        shutil.rmtree(tmp, ignore_errors=True)

    def _members_of(self, entry: CacheEntry) -> Tuple[Member, ...]:
        rel = entry.path or manifest_path(entry.kind, entry.key)
        current = read_manifest(self._store, rel, entry.kind, entry.key, [])
        if current is None or current.blob != entry.blob:
            raise CacheCorrupt(f"the manifest of {entry.kind}/{entry.key[:12]} is gone or names another blob")
        return current.members

    def _unpack(self, entry: CacheEntry, members: Tuple[Member, ...], tree: str) -> None:
        """Extract the blob into the staging folder ``tree`` straight from the store, in one pass.

        The blob is read once, in place (a folder cache) or as a stream (a URL): its bytes are hashed on
        their way into the decompressor, each member is checked against the manifest before it is written
        and each file hashed while it is written.  The blob's own hash is known only at its end, so the
        caller renames the staging folder into place only after this returns.
        """
        with contextlib.ExitStack() as stack:
            try:
                src = stack.enter_context(self._store.open_read(blob_path(entry.blob)))
            except FileNotFoundError:
                raise CacheCorrupt(f"blob {entry.blob[:12]}.. is missing from the cache (pruned while in use?)"
                                   ) from None
            blob = BlobReader(src, entry.size, entry.blob)
            try:
                # A stream ("r|"): each header is checked before its member is written.  The gzip layer is
                # ours, not tarfile's: its "r|gz" decompresses each read whole, so one read of a highly
                # compressible blob (a hostile one: 1 MiB of zeros is 1 GiB) would land in memory at once.
                with tarfile.open(fileobj=cast(IO[bytes], Gunzip(blob)), mode="r|", bufsize=_TAR_BUFFER) as tar:
                    os.mkdir(tree, 0o755)
                    extract_checked(tar, tree, members)
            except CacheCorrupt:
                blob.check_rest()  # a damaged blob is named as such, not by the first symptom it caused
                raise
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                blob.check_rest()
                raise CacheCorrupt(f"blob {entry.blob[:12]} is not a readable gzip'd tar: {exc}") from None
            blob.check_rest()
        check_tree(tree, members)

    # -- writing -------------------------------------------------------------------------------------
    def publish(self, kind: str, key: str, fields: Mapping[str, object], source: str,
                signers: Sequence[SecretKey] = ()) -> Published:
        """Pack the folder ``source`` and publish it under ``kind``/``key`` (blob first, then the manifest's
        signatures by ``signers``, manifest last), replacing no manifest that is there (variants.py)."""
        check_name(kind, key)
        if cache_key(kind, fields) != key:
            raise ValueError(f"key {key[:12]}.. is not cache_key({kind!r}, fields)")
        if not os.path.isdir(source):
            raise CacheError(f"cannot publish {source}: it is not a folder")
        try:
            check_members([member for member, _full in walk(source)])
        except CacheCorrupt as exc:
            # Publishing it would only produce an entry that every fetch refuses.
            raise CacheError(f"cannot publish {source}: {exc.reason}; the cache stores self-contained trees "
                             "of files, folders and relative symlinks") from None
        except OSError as exc:
            raise CacheError(f"cannot publish {source}: {exc}") from None
        tmp = self._store.new_upload("blobs")
        try:
            with open(tmp, "wb") as out:
                blob, size, members = pack(source, out)
            check_members(members)
            rel = blob_path(blob)
            if self._store.exists(rel):
                self._store.discard_upload(tmp)  # same name, same bytes: someone published them already
            else:
                self._store.commit_upload(tmp, rel)
        except CacheCorrupt as exc:
            self._store.discard_upload(tmp)
            raise CacheError(f"cannot publish {source}: {exc.reason} (it changed while being packed)") from None
        except OSError as exc:
            self._store.discard_upload(tmp)
            raise CacheError(f"cannot publish {source} to {self.location}: {exc.strerror or exc}") from None
        except BaseException:
            self._store.discard_upload(tmp)
            raise
        entry = CacheEntry(kind=kind, key=key, blob=blob, size=size, created=time.time(), fields=dict(fields),
                           files=sum(1 for m in members if m.type == "file"), members=tuple(members),
                           host=socket.gethostname(), tool=f"ensure-flydsl {__version__}")
        # The signatures go before the manifest: a reader never sees this entry unsigned.
        return place(self._store, replace(entry, manifest=manifest_bytes(entry)), signers)

    def prune(self, max_bytes: int) -> List[CacheEntry]:
        """Remove the oldest entries until the blobs still referenced total at most ``max_bytes``.

        Then remove blobs that no entry names (and abandoned uploads, staged manifests and signatures),
        returned as kind ``"orphan"`` pseudo-entries; those that were never referenced only once older than
        ORPHAN_GRACE_S, since a publisher uploads its blob before its manifest.  Unreadable manifests are left
        alone.
        """
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        blobs: Dict[str, StoredFile] = {}
        others: List[StoredFile] = []
        for stored in self._store.list_files("blobs"):
            name = stored.path.rsplit("/", 1)[-1]
            if name.endswith(".tar.gz") and HEX64.match(name[: -len(".tar.gz")]):
                blobs[name[: -len(".tar.gz")]] = stored
            elif name.startswith(".upload.") or name.endswith(".tmp"):
                others.append(stored)
        # A publisher killed mid-write leaves its staged manifest or signature (".NAME.<random>.tmp").
        others += [s for s in self._store.list_files("entries") if s.path.endswith(".tmp")]
        alive = sorted(self._manifests(), key=lambda item: item[1].created)

        def total() -> int:
            return sum(blobs[b].size for b in {e.blob for _r, e in alive} if b in blobs)

        removed: List[CacheEntry] = []
        while alive and total() > max_bytes:
            rel, victim = alive.pop(0)
            self._store.remove(rel)  # the manifest first: readers never see an entry without its blob
            removed.append(victim)
        referenced = {e.blob for _r, e in alive}
        freed = {e.blob for e in removed}
        now = time.time()
        for sha, stored in sorted(blobs.items()):
            old = stored.mtime is not None and now - stored.mtime > ORPHAN_GRACE_S
            if sha not in referenced and (sha in freed or old):
                self._store.remove(stored.path)
                if sha not in freed:
                    removed.append(orphan_entry(stored, sha))
        for stored in others:
            if stored.mtime is not None and now - stored.mtime > ORPHAN_GRACE_S:
                self._store.remove(stored.path)
                removed.append(orphan_entry(stored, ""))
        return removed + self._prune_signatures([entry for _rel, entry in alive], now)

    def _prune_signatures(self, alive: List[CacheEntry], now: float) -> List[CacheEntry]:
        """Remove the signature objects older than the grace that sign none of the manifests kept."""
        versions: Dict[Tuple[str, str], Set[str]] = {}
        for entry in alive:
            versions.setdefault((entry.kind, entry.key), set()).add(manifest_sha(entry.manifest))
        removed = []
        for stored in stale_signatures(self._store, versions, now - ORPHAN_GRACE_S):
            self._store.remove(stored.path)  # it signs a manifest that is gone or was edited
            removed.append(orphan_entry(stored, ""))
        return removed
