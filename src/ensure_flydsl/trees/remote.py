"""The store's shared tiers (the binary cache), in a folder or behind an fsspec URL: content-addressed blobs, the
first manifest of a key and signers' variants beside it, never replaced while a host may trust it (docs/fleet.md)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Set, Tuple

from ensure_flydsl.support import space
from ensure_flydsl.support.files import remove_file, rename_into_place
from ensure_flydsl.trees import signing
from ensure_flydsl.trees.archive import pack, set_modes, unpack
from ensure_flydsl.trees.backends import CacheCorrupt, CacheError, Store, StoredFile, open_store
from ensure_flydsl.trees.manifest import (
    HEX64,
    MAX_MANIFEST_BYTES,
    CacheEntry,
    NewerFormat,
    cache_key,
    check_members,
    check_name,
    manifest_bytes,
    new_entry,
    orphan_entry,
    parse_manifest,
    prune_order,
    walk,
)
from ensure_flydsl.trees.signing import KEY_NAME, PublicKey, SecretKey

ORPHAN_GRACE_S = 3600.0  # an unreferenced blob younger than this may be a publisher's whose manifest comes next
MAX_VARIANTS = 64  # per key: one per signing key; more is a store flooded on purpose


def manifest_path(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"entries/{kind}/{key}.json"


def variants_dir(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"entries/{kind}/{key}.by"


def variant_path(kind: str, key: str, name: str) -> str:
    if not KEY_NAME.match(name):
        raise ValueError(f"{name!r} is not a key name")
    return f"{variants_dir(kind, key)}/{name}.json"


def blob_path(blob: str) -> str:
    return f"blobs/{blob}.tar.gz"


@dataclass(frozen=True)
class Published:
    """What a publish did: ``entry`` (with its ``path`` when written), ``why`` not, ``note`` anything besides."""

    entry: CacheEntry
    why: str = ""
    note: str = ""

    @property
    def written(self) -> bool:
        return bool(self.entry.path)


def open_cache(location: str) -> "Cache":
    """The store at a folder path or an fsspec URL; CacheError when it cannot be used (a missing extra...)."""
    return Cache(open_store(location))


class Cache:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.location = store.location
        self.read_only = store.read_only  # a folder this user may not write in: fetch only, publish nothing
        self.warnings: List[str] = []  # manifests skipped as unreadable, one line each, for the caller to say
        self.said: Set[str] = set()  # lines said about this store in this run (each once)
        self.newer = False  # a manifest of a later version's format was seen: what it names is unknown here

    @property
    def down(self) -> Optional[str]:
        return self.store.down

    def read_manifest(self, rel: str, kind: str = "", key: str = "") -> Optional[CacheEntry]:
        """The manifest at ``rel`` (of ``kind``/``key`` when given); None when absent or unusable (why noted)."""
        try:
            data = self.store.read_bytes(rel, MAX_MANIFEST_BYTES)
            if data is None:
                return None
            entry = parse_manifest(data, rel)
            if kind and (entry.kind, entry.key) != (kind, key):
                raise ValueError(f"it describes {entry.kind}/{entry.key}")
            return entry
        except (CacheCorrupt, ValueError) as exc:  # a FIFO, a link: not a manifest; built around like a torn one
            self.newer = self.newer or isinstance(exc, NewerFormat)
            self.warnings.append(f"ignored the manifest {rel} in {self.location}: {exc}")
        return None

    def lookup(self, kind: str, key: str) -> Optional[CacheEntry]:
        """The first manifest published for the key, or None (a miss, or one that cannot be parsed)."""
        return self.read_manifest(manifest_path(kind, key), kind, key)

    def variants(self, kind: str, key: str, prefer: Sequence[str] = ()) -> List[CacheEntry]:
        """The variants of the key, from one listing: those named in ``prefer`` first, then by name."""
        top = variants_dir(kind, key)
        leaves = [s.path[len(top) + 1:-len(".json")] for s in self.store.list_files(top)
                  if s.path.startswith(top + "/") and s.path.endswith(".json")]
        names = sorted((name for name in leaves if KEY_NAME.match(name)), key=lambda name: (name not in prefer, name))
        if len(names) > MAX_VARIANTS:
            self.warnings.append(f"read only {MAX_VARIANTS} of the {len(names)} variants of {kind}/{key[:12]} in "
                                 f"{self.location}")
        found = (self.read_manifest(variant_path(kind, key, name), kind, key) for name in names[:MAX_VARIANTS])
        return [entry for entry in found if entry is not None]

    def entries(self) -> List[CacheEntry]:
        """Every readable entry, newest first."""
        found = (self.read_manifest(s.path) for s in self.store.list_files("entries")
                 if s.path.endswith(".json") and not s.path.rsplit("/", 1)[-1].startswith("."))
        # None: pruned meanwhile, or unusable
        return sorted((e for e in found if e is not None), key=lambda e: e.created, reverse=True)

    def get(self, entry: CacheEntry, dest: str) -> None:
        """Verify ``entry`` and unpack it as the new folder ``dest``; on any failure nothing is left behind."""
        dest = os.path.abspath(dest)
        if os.path.lexists(dest):
            raise CacheError(f"cannot fetch into {dest}: it already exists (the caller removes it first)")
        members = entry.members
        check_members(members)  # a manifest naming ../x is refused before a byte is downloaded
        try:
            tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.fetch-", dir=os.path.dirname(dest))
        except OSError as exc:
            raise CacheError(f"cannot fetch into {dest}: {exc.strerror or exc}") from None
        try:
            tree = os.path.join(tmp, "tree")
            try:
                with self.store.open_read(blob_path(entry.blob)) as src:
                    unpack(src, entry.size, entry.blob, members, tree)
            except FileNotFoundError:
                raise CacheCorrupt(f"blob {entry.blob[:12]}.. is missing from the cache (pruned while in use?)"
                                   ) from None
            set_modes(tree, members)
            if os.path.lexists(dest):
                raise CacheError(f"cannot fetch into {dest}: something else created it meanwhile")
            rename_into_place(tree, dest)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)  # before df counts the free space
            # A full disk must not leave half a tree that looks like a finished one.
            why = space.no_space(dest, exc.errno) if space.is_full(exc) else (exc.strerror or str(exc))
            raise CacheError(f"fetching {entry.kind} entry {entry.key[:12]} into {dest} failed: {why}; nothing "
                             "was left behind; free space on that file system or unset FLYDSL_CACHE") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def put(self, kind: str, key: str, fields: Mapping[str, object], source: str,
                signers: Sequence[SecretKey] = ()) -> Published:
        """Pack ``source`` and publish it: the blob, the signatures, the manifest last (never seen unsigned)."""
        check_name(kind, key)
        if cache_key(kind, fields) != key:
            raise ValueError(f"key {key[:12]}.. is not cache_key({kind!r}, fields)")
        if not os.path.isdir(source):
            raise CacheError(f"cannot publish {source}: it is not a folder")
        try:
            check_members([member for member, _full in walk(source)])
        except CacheCorrupt as exc:  # it would only make an entry that every fetch refuses
            raise CacheError(f"cannot publish {source}: {exc.reason}; the cache stores self-contained trees "
                             "of files, folders and relative symlinks") from None
        except OSError as exc:
            raise CacheError(f"cannot publish {source}: {exc}") from None
        tmp = self.store.new_upload("blobs")
        try:
            with open(tmp, "wb") as out:
                blob, size, members = pack(source, out)
            check_members(members)
            if not self.store.exists(blob_path(blob)):  # else the same name, the same bytes: published already
                self.store.commit_upload(tmp, blob_path(blob))
        except CacheCorrupt as exc:
            raise CacheError(f"cannot publish {source}: {exc.reason} (it changed while being packed)") from None
        except OSError as exc:
            raise CacheError(f"cannot publish {source} to {self.location}: {exc.strerror or exc}") from None
        finally:
            remove_file(tmp)  # what a commit did not take
        entry = new_entry(kind, key, fields, members, blob=blob, size=size)
        return self.put_manifest(replace(entry, manifest=manifest_bytes(entry)), signers)

    def put_manifest(self, entry: CacheEntry, signers: Sequence[SecretKey]) -> Published:
        """Sign ``entry``'s manifest and write it where it belongs, replacing no manifest (the module's rules)."""
        written = [signing.write_signature(self.store, entry.kind, entry.key, entry.manifest, s) for s in signers]
        placed = self._place(entry, signers)
        if not placed.written:
            for rel in written:
                self.store.remove(rel)  # this publish's own, a moment ago: they sign nothing the store holds
        return placed

    def _look(self, rel: str, kind: str, key: str) -> Tuple[Optional[bytes], Optional[CacheEntry], str, str]:
        """At a manifest's path: its bytes, its entry of this key, why it is no file, why no host installs it."""
        try:
            data = self.store.read_bytes(rel, MAX_MANIFEST_BYTES)
        except CacheCorrupt as exc:
            return None, None, exc.reason, ""
        if data is None:
            return None, None, "", ""
        try:
            entry: Optional[CacheEntry] = parse_manifest(data, rel)
        except NewerFormat:  # a later version's
            return data, None, "", ""
        except ValueError:
            entry = None
        if entry is None or (entry.kind, entry.key) != (kind, key):
            return data, None, "", "which was not a manifest of this key"
        if not self.store.exists(blob_path(entry.blob)):
            return data, entry, "", "whose blob is gone, so that no host can install it"
        return data, entry, "", ""

    def _place(self, entry: CacheEntry, signers: Sequence[SecretKey]) -> Published:
        kind, key, data = entry.kind, entry.key, entry.manifest
        primary = manifest_path(kind, key)
        for _attempt in range(2):  # again when the manifest there was pruned meanwhile
            if not self.store.exists(primary) and self.store.create_exclusive(primary, data):
                return Published(replace(entry, path=primary))
            found, holds, blocked, dead = self._look(primary, kind, key)
            if found is not None or blocked:
                break
        if found == data:
            return Published(replace(entry, path=primary), note="the same manifest was there already")
        if dead:
            self.store.put_bytes(primary, data)
            return Published(replace(entry, path=primary), note=f"in place of {primary}, {dead}")
        if not signers:
            what = f"{primary} is {blocked}" if blocked else f"an entry for this key is already there ({primary})"
            return Published(entry, why=f"{what}, and a publish never replaces one (other hosts may trust it)")
        return self._variant(entry, signers, holds)

    def _variant(self, entry: CacheEntry, signers: Sequence[SecretKey], there: Optional[CacheEntry]) -> Published:
        kind, key, name = entry.kind, entry.key, signers[0].name
        rel = variant_path(kind, key, name)
        mine = [PublicKey(secret.name, secret.public) for secret in signers]
        for attempt in range(2):  # again after losing the create to another host that signs with NAME
            current = ([there] if there is not None else []) + self.variants(kind, key, [name])
            live = {signing.manifest_sha(e.manifest) for e in current}
            for other in current:  # one that lost its blob does not count: it is replaced below
                if signing.check_entry(self.store, other, mine, None, live).trusted and \
                        self.store.exists(blob_path(other.blob)):
                    return Published(entry, why=f"{other.path} is signed by {name} already")
            if attempt == 0 and not self.store.exists(rel) and self.store.create_exclusive(rel, entry.manifest):
                return Published(replace(entry, path=rel),
                                 note=f"as {rel}, beside the entry another host published for this key")
        dead = self._look(rel, kind, key)[3]
        if dead:
            self.store.put_bytes(rel, entry.manifest)
            return Published(replace(entry, path=rel), note=f"in place of {rel}, {dead}")
        return Published(entry, why=f"{rel} is there but no signature of {name} covers it (edited, or not written by "
                         "this tool), and a publish never replaces a manifest: remove it to let a host that signs "
                         f"with {name} publish there")

    def prune(self, max_bytes: int) -> List[CacheEntry]:
        """The oldest entries removed until their blobs total at most ``max_bytes``; then, as ``orphan`` entries,
        what nothing names (uploads, staged manifests; unless ``newer``, blobs and signatures) after ORPHAN_GRACE_S."""
        blobs: Dict[str, StoredFile] = {}
        others: List[StoredFile] = []
        for stored in self.store.list_files("blobs"):
            name = stored.path.rsplit("/", 1)[-1]
            if name.endswith(".tar.gz") and HEX64.match(name[: -len(".tar.gz")]):
                blobs[name[: -len(".tar.gz")]] = stored
            elif name.startswith(".upload.") or name.endswith(".tmp"):
                others.append(stored)
        others += [s for s in self.store.list_files("entries") if s.path.endswith(".tmp")]  # killed publishers'
        manifests = self.entries()

        def total(staying: Sequence[CacheEntry]) -> int:
            return sum(blobs[b].size for b in {e.blob for e in staying} if b in blobs)

        removed = prune_order(manifests, max_bytes, total)
        for entry in removed:
            self.store.remove(entry.path)  # the manifest first: readers never see an entry without its blob
        gone = {entry.path for entry in removed}
        alive = [entry for entry in manifests if entry.path not in gone]
        referenced, freed, now = {e.blob for e in alive}, {e.blob for e in removed}, time.time()

        def old(stored: StoredFile) -> bool:
            return stored.mtime is not None and now - stored.mtime > ORPHAN_GRACE_S

        for sha, stored in sorted(blobs.items()):
            if sha not in referenced and (sha in freed or old(stored) and not self.newer):
                self.store.remove(stored.path)
                if sha not in freed:
                    removed.append(orphan_entry(stored, sha))
        versions = signing.live_versions(alive)
        for stored in others + ([] if self.newer else signing.stale_signatures(self.store, versions)):
            if old(stored):  # a younger one may be a publisher's whose manifest comes next
                self.store.remove(stored.path)
                removed.append(orphan_entry(stored, ""))
        return removed
