"""Something other than a regular file at every name the binary cache uses (issue 26, item 12), for the state
machine (tests/scenarios/test_state_machine.py): a folder, a link to a folder, a dangling link or a FIFO
where the tool reads or writes a manifest, a variant, a signature, a blob, an upload in progress, a lease
generation, a staged copy of one, or a folder of them.  The names are those of src/ensure_flydsl/binary_cache/
(manifest.py, variants.py, signing.py, entries.py, folder.py, lease.py), spelled here without the tool's code.

A plant at a lease's name also takes the key's manifest away (as a broken host's cleanup would): a lease is
taken only on a miss, so the next host's run for the key meets the plant.

Links point into the machine's sentinel folder, whose listing must never change (invariant 9): nothing is
written or removed through them.  Nothing is planted through a link or over a folder, and only a regular
file of the tool's (a manifest, a blob) is replaced by the plant.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, Optional

ODD_KINDS = ("folder", "link-folder", "dangling-link", "fifo")

# name -> its path relative to the cache, for (the tree's key, its blob's sha256, a number to vary names by).
_Path = Callable[[str, str, int], str]
CACHE_NAMES: Dict[str, _Path] = {
    "manifest": lambda key, blob, pick: f"entries/tree/{key}.json",
    "variants-folder": lambda key, blob, pick: f"entries/tree/{key}.by",
    "variant": lambda key, blob, pick: f"entries/tree/{key}.by/k{pick % 3}.json",
    "signatures-folder": lambda key, blob, pick: f"entries/tree/{key}.sig",
    "signature": lambda key, blob, pick: f"entries/tree/{key}.sig/{'a' * 64}/k{pick % 3}.sig",
    "staged-manifest": lambda key, blob, pick: f"entries/tree/.{key}.json.planted{pick}.tmp",
    "blob": lambda key, blob, pick: f"blobs/{blob}.tar.gz",
    "upload": lambda key, blob, pick: f"blobs/.upload.planted{pick}.tmp",
    "lease-folder": lambda key, blob, pick: f"leases/tree/{key}",
    "generation": lambda key, blob, pick: "",  # the next generation's name: worked out from the folder
    "staged-generation": lambda key, blob, pick: f"leases/tree/{key}/.{pick + 1:010d}.json.planted.tmp",
    "create-staged": lambda key, blob, pick: f"leases/tree/{key}/.create.planted{pick}.tmp",
    "entries-kind": lambda key, blob, pick: "entries/tree",
    "leases-kind": lambda key, blob, pick: "leases/tree",
    "blobs": lambda key, blob, pick: "blobs",
}
_WITHOUT_KEY = ("entries-kind", "leases-kind", "blobs")
_LEASE_NAMES = ("lease-folder", "generation", "staged-generation", "create-staged")


def _blob_of(cache: str, key: str) -> str:
    path = os.path.join(cache, "entries", "tree", key + ".json")
    try:
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path) as handle:
                blob = json.load(handle).get("blob")
            if isinstance(blob, str) and len(blob) == 64:
                return blob
    except (OSError, ValueError, AttributeError):
        pass
    return "b" * 64  # no entry yet: the name a blob would have


def _next_generation(cache: str, key: str) -> str:
    folder = os.path.join(cache, "leases", "tree", key)
    names = os.listdir(folder) if os.path.isdir(folder) and not os.path.islink(folder) else []
    gens = [int(n[:10]) for n in names if len(n) == 15 and n.endswith(".json") and n[:10].isdigit()]
    return f"leases/tree/{key}/{max(gens, default=0) + 1:010d}.json"


def _parents_are_folders(cache: str, rel: str) -> bool:
    """Every existing folder between the cache and ``rel`` is a real folder (no link, no file in the way)."""
    current = cache
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.lexists(current) and not os.path.isdir(current)):
            return False
    return True


def plant_odd(cache: str, name: str, kind: str, key: str, pick: int, sentinel: str) -> Optional[str]:
    """Plant ``kind`` at the cache's ``name`` for the tree ``key``; the path planted (None: nothing to plant on)."""
    if not key and name not in _WITHOUT_KEY:
        return None
    rel = _next_generation(cache, key) if name == "generation" else CACHE_NAMES[name](key, _blob_of(cache, key), pick)
    if not _parents_are_folders(cache, rel):
        return None
    path = os.path.join(cache, *rel.split("/"))
    if os.path.lexists(path):
        if os.path.islink(path) or not os.path.isfile(path):
            return None  # a folder, a link, a FIFO already: never removed by the test
        os.unlink(path)  # a manifest or a blob of the tool's: replaced by the plant
    os.makedirs(os.path.dirname(path), exist_ok=True)
    manifest = os.path.join(cache, "entries", "tree", key + ".json")
    if name in _LEASE_NAMES and _parents_are_folders(cache, f"entries/tree/{key}.json") \
            and os.path.isfile(manifest) and not os.path.islink(manifest):
        os.unlink(manifest)
    if kind == "folder":
        os.makedirs(os.path.join(path, "inside"))
    elif kind == "link-folder":
        os.symlink(sentinel, path)
    elif kind == "dangling-link":
        os.symlink(os.path.join(sentinel, f"nowhere-{pick}"), path)
    else:
        os.mkfifo(path)
    return path
