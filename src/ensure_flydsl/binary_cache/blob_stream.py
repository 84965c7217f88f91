"""A cache blob checked while it streams (binary_cache/entries.py: ``Cache.fetch``): every byte hashed and
counted on its way into the decompressor, read in bounded pieces; then the extracted tree held against the
manifest's members, and their modes set."""

from __future__ import annotations

import hashlib
import os
import zlib
from typing import IO, Tuple

from ensure_flydsl.binary_cache.archive import CHUNK, Member, walk
from ensure_flydsl.binary_cache.store import CacheCorrupt

GZIP_INPUT = 64 << 10  # compressed bytes fed to zlib at a time


class BlobReader:
    """The blob as tarfile reads it: every byte hashed and counted on its way through, once."""

    def __init__(self, src: IO[bytes], size: int, sha256: str) -> None:
        self._src = src
        self._expected_size = size
        self._expected_sha = sha256
        self._digest = hashlib.sha256()
        self._size = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._src.read(CHUNK if size is None or size < 0 else size)
        self._digest.update(chunk)
        self._size += len(chunk)
        if self._size > self._expected_size:
            raise CacheCorrupt(f"blob size mismatch: expected {self._expected_size} bytes, got more")
        return chunk

    def check_rest(self) -> None:
        """Read what the tar stream left (its end blocks, gzip's trailer) and hold the whole against the manifest."""
        while self.read(CHUNK):
            pass
        if self._size != self._expected_size:
            raise CacheCorrupt(f"blob size mismatch: expected {self._expected_size} bytes, got {self._size} "
                               "(truncated)")
        got = self._digest.hexdigest()
        if got != self._expected_sha:
            raise CacheCorrupt(f"blob sha256 mismatch: expected {self._expected_sha[:12]}.. got {got[:12]}..")


class Gunzip:
    """The decompressed stream of a gzip'd blob, never more than the size asked for per read."""

    def __init__(self, raw: BlobReader) -> None:
        self._raw = raw
        self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip header and trailer (CRC-32, length)

    def read(self, size: int = -1) -> bytes:
        size = CHUNK if size is None or size < 0 else size
        while not self._zlib.eof:
            # Small input pieces: zlib copies what a bounded call leaves unconsumed, once per call.
            data = self._zlib.unconsumed_tail or self._raw.read(GZIP_INPUT)
            if not data:
                raise EOFError("the blob ends inside its compressed data")
            out = self._zlib.decompress(data, size)
            if out:
                return out
        return b""


def check_tree(tree: str, members: Tuple[Member, ...]) -> None:
    """What landed on disk is exactly the manifest's members (their bytes were hashed while written)."""
    expected = {m.path: m for m in members}
    seen = set()
    for member, _full in walk(tree):
        want = expected.get(member.path)
        if want is None:
            raise CacheCorrupt(f"extracted tree holds {member.path!r}, which is not in the manifest")
        seen.add(member.path)
        if member.type != want.type or member.target != want.target or member.size != want.size:
            raise CacheCorrupt(f"extracted {member.path!r} differs from the manifest")
    missing = sorted(set(expected) - seen)
    if missing:
        raise CacheCorrupt(f"extracted tree lacks {missing[0]!r}, which the manifest lists")


def set_modes(tree: str, members: Tuple[Member, ...]) -> None:
    # Modes last, deepest first: a read-only folder must not stop the writes into it.
    for m in sorted(members, key=lambda m: m.path.count("/"), reverse=True):
        full = os.path.join(tree, *m.path.split("/"))
        if m.type == "file":
            os.chmod(full, m.mode & 0o755)  # never group/world-writable, never setuid
        elif m.type == "dir":
            os.chmod(full, (m.mode & 0o755) | 0o700)  # the owner must stay able to rebuild or remove it
