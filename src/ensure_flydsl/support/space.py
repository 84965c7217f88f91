"""A full file system, said the same way wherever it is met: which errors are one (ENOSPC, EDQUOT), and the
words for it (the file system that holds the path, its free space as ``df`` counts it, where it is mounted).

Every write of the tool's own files (run records, the ``current`` pointer, markers, the lock's holder, the
log, stamps, the env file) and every download or unpack that fills the disk ends in one line built from
:func:`no_space`, so a user reads the same words and the same advice for every one of them.  A file-size
limit (EFBIG, ``ulimit -f``) is the process's limit, not the file system's: it is not one of these.
"""

from __future__ import annotations

import errno
import os
from typing import Optional, Tuple

FULL = (errno.ENOSPC, errno.EDQUOT)


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is the file system (or the user's quota on it) having no room left."""
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
    """The folder where the file system holding ``path`` is mounted (``/`` at the latest)."""
    current = _existing(path)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while not os.path.ismount(current):
        current = os.path.dirname(current)
    return current


def free_space(path: str) -> Optional[Tuple[int, int]]:
    """The bytes free for this user and the size of the file system holding ``path``, as ``df`` says them;
    None when it cannot be told."""
    try:
        st = os.statvfs(_existing(path))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize


def no_space(path: str, code: Optional[int] = errno.ENOSPC) -> str:
    """The words for a full file system at ``path`` (``code`` EDQUOT: the user's quota on it), naming the
    file system, where it is mounted and its free space, e.g. ``no space left on the file system holding
    /x/base/.flydsl_build.failed (df: 0 B free of 2.0 MiB, mounted at /x)``."""
    figures = free_space(path)
    df = f"{size_text(figures[0])} free of {size_text(figures[1])}, " if figures else ""
    where = f"{path} (df: {df}mounted at {mount_point(path)})"
    if code == errno.EDQUOT:
        return f"the disk quota is used up on the file system holding {where}"
    return f"no space left on the file system holding {where}"
