"""A key's manifests, and how a publish places one without replacing any (an entry at a key may be one
that other hosts trust: a publish never takes it away from them)::

    <cache>/entries/<kind>/<key>.json            the first manifest published for the key
    <cache>/entries/<kind>/<key>.by/<NAME>.json  the variant of a host that signs with the key NAME

- **The first manifest** is created exclusively (link(2) in a folder, S3's ``If-None-Match: *``), after a
  look that it is not there (a store that ignores exclusive create then races only with a publish that
  began at the same moment).
- **When one is there**, a publish writes:
  the same bytes: nothing more (its signatures, written first, now sit beside them);
  over a file that is not a manifest of this key (torn, not JSON, another key's; not one of a newer
  format) or one whose blob is gone: the manifest, in its place (no host can install what is there);
  otherwise, when it signs with NAME and none of the key's manifests carries NAME's signature yet: its
  variant ``<key>.by/<NAME>.json``, created exclusively (or over a dead one there, as above);
  otherwise nothing, and says why: hosts without trusted keys take the entry that is there, and hosts
  with trusted keys would refuse an unsigned one anyway.
  Signature objects a publish wrote for a manifest it did not place are removed again (they are its own).
- **Readers** take the first manifest; when it is missing or not trusted (ways/cache/trust.py),
  the variants, those named after trusted keys first, at most :data:`MAX_VARIANTS` of them read.
  Versions of the tool before variants read the first manifest only: what they find there is never
  replaced under them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Optional, Sequence

from ensure_flydsl.binary_cache.manifest import (
    MAX_MANIFEST_BYTES,
    CacheEntry,
    blob_path,
    manifest_path,
    newer_format,
    parse_manifest,
    variant_path,
    variants_dir,
)
from ensure_flydsl.binary_cache.signing import check_entry, manifest_sha, public_of, write_signature
from ensure_flydsl.binary_cache.store import CacheCorrupt, Store
from ensure_flydsl.support.keys import KEY_NAME, SecretKey

MAX_VARIANTS = 64  # per key: one per signing key; more is a store flooded on purpose


@dataclass(frozen=True)
class Published:
    """What a publish did: ``entry`` is the manifest it made, its ``path`` where it was written ("" when
    it was not); ``why`` says what was in the way then, ``note`` anything besides when it was written."""

    entry: CacheEntry
    why: str = ""
    note: str = ""

    @property
    def written(self) -> bool:
        return bool(self.entry.path)


def read_manifest(store: Store, rel: str, kind: str, key: str, warnings: List[str]) -> Optional[CacheEntry]:
    """The manifest at ``rel`` if it is one of ``kind``/``key``; None when absent or unusable (why noted)."""
    try:
        data = store.read_bytes(rel, MAX_MANIFEST_BYTES)
    except CacheCorrupt as exc:  # a FIFO, a link...: not a manifest; built around like a torn one
        warnings.append(f"ignored the manifest {rel} in {store.location}: {exc.reason}")
        return None
    if data is None:
        return None
    try:
        entry = parse_manifest(data, rel)
        if (entry.kind, entry.key) != (kind, key):
            raise ValueError(f"it describes {entry.kind}/{entry.key}")
    except ValueError as exc:
        warnings.append(f"ignored the manifest {rel} in {store.location}: {exc}")
        return None
    return entry


def read_variants(store: Store, kind: str, key: str, prefer: Sequence[str],
                  warnings: List[str]) -> List[CacheEntry]:
    """The key's variants, from one listing: those named in ``prefer`` first, then by name."""
    top = variants_dir(kind, key) + "/"
    names = []
    for stored in store.list_files(variants_dir(kind, key)):
        leaf = stored.path[len(top):] if stored.path.startswith(top) else ""
        name = leaf[: -len(".json")] if leaf.endswith(".json") else ""
        if KEY_NAME.match(name):
            names.append(name)
    names.sort(key=lambda name: (name not in prefer, name))
    if len(names) > MAX_VARIANTS:
        warnings.append(f"read only {MAX_VARIANTS} of the {len(names)} variants of {kind}/{key[:12]} in "
                        f"{store.location}")
    found = (read_manifest(store, variant_path(kind, key, name), kind, key, warnings) for name in names[:MAX_VARIANTS])
    return [entry for entry in found if entry is not None]


def place(store: Store, entry: CacheEntry, signers: Sequence[SecretKey]) -> Published:
    """Sign ``entry``'s manifest and write it where it belongs, replacing no manifest (module docstring)."""
    written = [write_signature(store, entry.kind, entry.key, entry.manifest, secret) for secret in signers]
    placed = _place(store, entry, signers)
    if not placed.written:
        for rel in written:
            store.remove(rel)  # this publish's own, a moment ago: they sign nothing the store holds
    return placed


@dataclass(frozen=True)
class _There:
    """What a publish finds at a manifest's path it could not create."""

    data: Optional[bytes] = None  # its bytes (None: gone, or no regular file)
    entry: Optional[CacheEntry] = None  # the manifest of this key it holds
    blocked: str = ""  # why it is no file this tool may replace (a FIFO, a link)
    dead: str = ""  # why no host can install it, so that a publish may replace it ("" when one may)

    @property
    def gone(self) -> bool:
        return self.data is None and not self.blocked


def _look(store: Store, rel: str, kind: str, key: str) -> _There:
    try:
        data = store.read_bytes(rel, MAX_MANIFEST_BYTES)
    except CacheCorrupt as exc:  # a FIFO, a link: nobody's manifest, and not this tool's to replace
        return _There(blocked=exc.reason)
    if data is None:
        return _There()
    try:
        entry = parse_manifest(data, rel)
    except ValueError:
        entry = None
    if entry is None or (entry.kind, entry.key) != (kind, key):
        # Torn or foreign: no host can trust it.  A newer format's manifest is a later version's entry.
        return _There(data, None, dead="" if newer_format(data) else "which was not a manifest of this key")
    if not store.exists(blob_path(entry.blob)):
        return _There(data, entry, dead="whose blob is gone, so that no host can install it")
    return _There(data, entry)


def _place(store: Store, entry: CacheEntry, signers: Sequence[SecretKey]) -> Published:
    kind, key, data = entry.kind, entry.key, entry.manifest
    primary = manifest_path(kind, key)
    there = _There()
    for _attempt in range(2):  # once more when the manifest there was removed (pruned) meanwhile
        if not store.exists(primary) and store.create_exclusive(primary, data):
            return Published(replace(entry, path=primary))
        there = _look(store, primary, kind, key)
        if not there.gone:
            break
    if there.data == data:
        return Published(replace(entry, path=primary), note="the same manifest was there already")
    if there.dead:
        store.put_bytes(primary, data)
        return Published(replace(entry, path=primary), note=f"in place of {primary}, {there.dead}")
    if not signers:
        what = f"an entry for this key is already there ({primary})"
        if there.blocked:
            what = f"{primary} is {there.blocked}"
        return Published(entry, why=f"{what}, and a publish never replaces one (other hosts may trust it)")
    return _variant(store, entry, signers, there.entry)


def _variant(store: Store, entry: CacheEntry, signers: Sequence[SecretKey], there: Optional[CacheEntry]) -> Published:
    kind, key, name = entry.kind, entry.key, signers[0].name
    rel = variant_path(kind, key, name)
    mine = [public_of(secret) for secret in signers]
    for attempt in range(2):  # again after losing the create to another host that signs with NAME
        current = ([there] if there is not None else []) + read_variants(store, kind, key, [name], [])
        live = {manifest_sha(e.manifest) for e in current}
        for other in current:  # one that lost its blob does not count: it is replaced below
            if check_entry(store, other, mine, None, live).trusted and store.exists(blob_path(other.blob)):
                return Published(entry, why=f"{other.path} is signed by {name} already")
        if attempt == 0 and not store.exists(rel) and store.create_exclusive(rel, entry.manifest):
            return Published(replace(entry, path=rel),
                             note=f"as {rel}, beside the entry another host published for this key")
    slot = _look(store, rel, kind, key)
    if slot.dead:
        store.put_bytes(rel, entry.manifest)
        return Published(replace(entry, path=rel), note=f"in place of {rel}, {slot.dead}")
    return Published(entry, why=f"{rel} is there but no signature of {name} covers it (edited, or not written by "
                     "this tool), and a publish never replaces a manifest: remove it to let a host that signs with "
                     f"{name} publish there")
