"""What every store shares: its errors and its listing's records (apart from store.py so that the folder
store, folder.py, and the fsspec store can both use them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


class CacheError(Exception):
    """The cache cannot be used at all (bad location, missing extra, no access); the message says what to do."""


class CacheUnreachable(CacheError):
    """The cache's remote cannot be reached or is misconfigured (network, credentials, a missing bucket).

    The store remembers the first one for the rest of the run (``down``): every later operation raises it
    again at once instead of trying the endpoint again, so an unreachable cache costs one timeout per run."""


class CacheCorrupt(CacheError):
    """An entry that failed verification; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the cache's root, "/"-separated
    size: int
    mtime: Optional[float]  # None when the file system does not say


def bounded(data: bytes, rel: str, limit: int) -> bytes:
    """``data`` read as at most ``limit + 1`` bytes of ``rel``: CacheCorrupt when it is more than ``limit``
    (a manifest or record that large was not written by this tool; reading it whole could exhaust memory)."""
    if len(data) > limit:
        raise CacheCorrupt(f"{rel} is larger than {limit} bytes, which no record of this tool is")
    return data
