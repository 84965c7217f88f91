"""Putting one file of a tree at another path: a reflink (``FICLONE``: a copy that shares the blocks until
either side writes), else a hardlink (the same file: the store keeps its files read-only, and ``--verify``
checks a root's files against the store's hashes), else a copy.  The way is found once per pair of file
systems, on the first file, and kept; a file the kept way refuses falls to the next one."""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from typing import Optional

from ensure_flydsl.result import LINK_MODES

MODES = LINK_MODES
REFLINK, HARDLINK, COPY = MODES
FICLONE = 0x40049409  # _IOW(0x94, 9, int): Linux's clone of a whole file (btrfs, XFS, bcachefs, overlayfs on them)
# What a file system that cannot reflink (or link) says: the ioctl is unknown, not supported, or the two
# paths are on different file systems.
_REFUSED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EINVAL, errno.EXDEV, errno.ENOSYS, errno.EPERM, errno.EMLINK,
            errno.EBADF}


def reflink(src: str, dst: str) -> None:
    with open(src, "rb") as source:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.ioctl(fd, FICLONE, source.fileno())
        except BaseException:
            os.close(fd)
            os.unlink(dst)
            raise
        os.close(fd)


class Linker:
    """Places files from one folder's file system onto another's, by the first way that works there."""

    def __init__(self, first: str = REFLINK) -> None:
        self.mode: Optional[str] = None  # found on the first file
        self.first = first
        self.cross_device = False  # the hardlink failed with EXDEV: two file systems

    def place(self, src: str, dst: str) -> str:
        """``src`` at ``dst`` (which must not exist); the way used.  A copy or a reflink keeps the mtime, so a
        module's bytecode (which records its source's mtime) stays valid."""
        start = MODES.index(self.mode or self.first)
        for mode in MODES[start:]:
            try:
                _place(mode, src, dst)
            except OSError as exc:
                if mode == COPY or exc.errno not in _REFUSED:
                    raise
                if mode == HARDLINK and exc.errno == errno.EXDEV:
                    self.cross_device = True
                continue
            if self.mode is None or MODES.index(mode) > MODES.index(self.mode):
                self.mode = mode
            return mode
        raise AssertionError("a copy either works or raises")


def _place(mode: str, src: str, dst: str) -> None:
    if mode == REFLINK:
        reflink(src, dst)
    elif mode == HARDLINK:
        os.link(src, dst, follow_symlinks=False)
        return  # the same file: its mode and mtime are the store's
    else:
        shutil.copyfile(src, dst, follow_symlinks=False)
    st = os.stat(src)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
