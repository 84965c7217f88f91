"""Real ed25519 key pairs and real manifests for the signed-cache tests."""

from __future__ import annotations

from typing import Tuple

from ensure_flydsl.cli.cache import keygen as _keygen
from ensure_flydsl.trees.archive import Member
from ensure_flydsl.trees.manifest import CacheEntry, manifest_bytes
from ensure_flydsl.trees.signing import generate
from tests.helpers.cache_entries import FIELDS, KEY

# A secret key's line (never used to sign anything): for refusals that must not copy it anywhere.
SECRET_LINE = generate("k1")[0]


def keygen(folder: str, name: str) -> Tuple[str, str]:
    """``cache keygen --out FOLDER NAME``'s files: (secret path, public path)."""
    return _keygen(folder, name)


def entry_manifest() -> bytes:
    """The bytes of a tree manifest as publish writes them: key fields, blob hash, members with hashes."""
    members = (Member("flydsl", "dir", 0o755), Member(path="flydsl/__init__.py", type="file", mode=0o644, size=24,
                                                      sha256="ab" * 32),
               Member(path="flydsl/_mlir/libFly.so", type="symlink", mode=0o777, size=0, sha256=None,
                      target="libFly.so.1"))
    entry = CacheEntry(kind="tree", key=KEY, blob="cd" * 32, size=123456, created=1764547200.25, fields=FIELDS,
                       members=members, host="ci-host", tool="ensure-flydsl 1.0")
    return manifest_bytes(entry)
