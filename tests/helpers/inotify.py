"""The kernel's own order of the files renamed into folders (inotify, through ctypes): which of two files a
run wrote last, where their times would tie (a file's mtime moves in steps of a clock tick)."""

from __future__ import annotations

import ctypes
import os
import struct
from typing import Dict, List, Tuple

IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


class Renames:
    """Every file renamed into the watched folders (an atomic write's last act), in the order it happened."""

    def __init__(self, *folders: str) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(IN_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._folders: Dict[int, str] = {}
        for folder in folders:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder), IN_MOVED_TO)
            if wd < 0:
                raise OSError(ctypes.get_errno(), "inotify_add_watch", folder)
            self._folders[wd] = folder
        self.seen: List[Tuple[str, int]] = []

    def read(self) -> List[Tuple[str, int]]:
        """The paths seen so far, each with its event's mask."""
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return self.seen
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                name = data[offset + _HEADER.size: offset + _HEADER.size + size].rstrip(b"\0")
                offset += _HEADER.size + size
                self.seen.append((os.path.join(self._folders[wd], os.fsdecode(name)), mask))

    def last_rename(self, path: str) -> int:
        """The place of the last rename into ``path`` among all the events (ValueError: none)."""
        places = [i for i, (seen, _mask) in enumerate(self.read()) if seen == path]
        if not places:
            raise ValueError(f"{path} was never renamed into place; seen: {self.seen}")
        return places[-1]

    def close(self) -> None:
        os.close(self.fd)
