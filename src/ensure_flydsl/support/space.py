"""A full file system (ENOSPC, EDQUOT), said the same way wherever it is met: the file system, its free space
as ``df`` counts it, and where it is mounted.  EFBIG (``ulimit -f``) is the process's limit, not one of these."""

from __future__ import annotations

import errno
import os
from typing import Optional

FULL = (errno.ENOSPC, errno.EDQUOT)


def is_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in FULL


def size_text(count: int) -> str:
    """``0 B``, ``12 KiB``, ``1.5 MiB``, ``320 GiB``: a size as a person reads it."""
    if count < 1024:
        return f"{count} B"
    value = count / 1024.0
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
        value /= 1024.0
    raise AssertionError("unreachable")


def _existing(path: str) -> str:
    """``path`` or its nearest existing parent (a file that could not be created is not there to stat)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def mount_point(path: str) -> str:
    current = _existing(path)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def no_space(path: str, code: Optional[int] = errno.ENOSPC) -> str:
    """The words for a full file system at ``path`` (EDQUOT: the user's quota on it), with ``df``'s figures."""
    try:
        st = os.statvfs(_existing(path))
        df = f"{size_text(st.f_bavail * st.f_frsize)} free of {size_text(st.f_blocks * st.f_frsize)}, "
    except OSError:
        df = ""
    where = f"{path} (df: {df}mounted at {mount_point(path)})"
    if code == errno.EDQUOT:
        return f"the disk quota is used up on the file system holding {where}"
    return f"no space left on the file system holding {where}"
