"""Sizes as people write and read them, and a full file system (ENOSPC, EDQUOT) said the same way wherever it is
met, with ``df``'s figures and its mount point.  EFBIG (``ulimit -f``) is the process's limit, not one of these."""

from __future__ import annotations

import errno
import math
import os
import re
from typing import Optional

FULL = (errno.ENOSPC, errno.EDQUOT)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL


def parse_size(text: str) -> int:
    """``"500M"``, ``"2G"``, ``"1.5T"``, ``"1234"`` (also ``500MB``, ``2GiB``) in bytes; units are powers of 1024."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size: bytes, or a number with K, M, G or T (e.g. 500M, 2G, 1.5T)")
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if not math.isfinite(value) or value >= 2**63:
        raise ValueError(f"{text!r} is too large a size")
    return int(value)


def size_text(size: float, *, df: bool = False) -> str:
    """``0 B``, ``1.5 KiB``, ``270.0 MiB``; as ``df`` says them (``df``), whole from 10 up and at most GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == ("GiB" if df else "TiB"):
            break
        size /= 1024
    if unit == "B" or (df and size >= 10):
        return f"{size:.0f} {unit}"
    return f"{size:.1f} {unit}"


def mount_point(path: str) -> str:
    """Where the file system holding ``path`` is mounted (or would hold it: a file not yet created)."""
    current = os.path.abspath(path)
    while not os.path.isdir(current):
        current = os.path.dirname(current)
    while not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def no_space(path: str, code: Optional[int] = errno.ENOSPC) -> str:
    """The words for a full file system at ``path`` (EDQUOT: the user's quota on it), with ``df``'s figures."""
    mount = mount_point(path)
    try:
        st = os.statvfs(mount)
        free, total = (size_text(blocks * st.f_frsize, df=True) for blocks in (st.f_bavail, st.f_blocks))
        df = f"{free} free of {total}, "
    except OSError:
        df = ""
    where = f"{path} (df: {df}mounted at {mount})"
    if code == errno.EDQUOT:
        return f"the disk quota is used up on the file system holding {where}"
    return f"no space left on the file system holding {where}"
