"""A full file system for any step of a test: a small tmpfs the test mounts, filled to its last byte by a
filler file, with the workspace (root, base folder, lock, marker, log, run records) inside it.

``full_disk(path)`` mounts it (unmounted in a finalizer; the test is skipped, saying why, only where mounting
is not permitted); ``disk.fill()`` takes every byte that is left, ``disk.drain()`` gives them back.  A
provisioning run needs room to start (the doctor asks for 0.5 GiB free), so ``fill`` first shrinks the file
system to what is used, plus a little, and fills that: the run that had room a moment ago now has none,
without the test writing 0.5 GiB of filler.  ``fill`` refuses any path that is not the tmpfs it mounted:
filling a real disk to its last byte would stop every other process on the machine.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from typing import Iterator

from tests.helpers.reliability import tmpfs

PAGE = 4096
FILLER = ".filler"


def _mounted_tmpfs(path: str) -> bool:
    """Whether ``path`` is itself the mount point of a tmpfs (/proc/self/mounts, octal escapes as the kernel
    writes them)."""
    wanted = os.path.realpath(path).replace(" ", "\\040")
    with open("/proc/self/mounts") as handle:
        return any(fields[1] == wanted and fields[2] == "tmpfs"
                   for fields in (line.split() for line in handle) if len(fields) > 2)


class FullDisk:
    """The tmpfs at ``path`` of ``size`` (mount's notation: ``2m``, ``600m``)."""

    def __init__(self, path: str, size: str) -> None:
        self.path = path
        self.size = size
        self.filler = os.path.join(path, FILLER)

    def free(self) -> int:
        """Bytes free (``df``'s available)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def used(self) -> int:
        st = os.statvfs(self.path)
        return (st.f_blocks - st.f_bfree) * st.f_frsize

    def _remount(self, size: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(["mount", "-o", f"remount,size={size}", self.path], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=False)

    def shrink(self, spare: int, attempts: int = 50) -> None:
        """Resize the file system to what it holds plus ``spare`` bytes.  A run in flight
        may write between the reading of what is used and the remount, and the kernel refuses a tmpfs smaller
        than its use ("Too small a size for current use", mount's "bad option"): then read again and retry.
        Only ``attempts`` refusals in a row fail (a run may also delete between a refusal and the next reading,
        so one refusal says nothing by itself)."""
        refused = ""
        for _ in range(attempts):
            size = self.used() + spare
            done = self._remount(str(size))
            if done.returncode == 0:
                return
            refused = f"to {size}: {done.stdout}"
        raise AssertionError(f"cannot resize the tmpfs at {self.path} ({attempts} attempts), the last {refused}")

    def fill(self, spare: int = 16 * PAGE) -> None:
        """Shrink the file system to what it holds plus ``spare`` bytes, then write the filler until the kernel
        says ENOSPC, in ever smaller writes down to one byte: not a byte is left."""
        assert _mounted_tmpfs(self.path), f"{self.path} is not the tmpfs this test mounted: refusing to fill it"
        self.shrink(spare)
        cap = os.statvfs(self.path).f_blocks * os.statvfs(self.path).f_frsize  # never more than it holds
        written = 0
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for chunk in (64 * 1024, PAGE, 1):
                block = b"\0" * chunk
                while written < cap:
                    try:
                        written += os.write(fd, block)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        finally:
            os.close(fd)
        assert self.free() == 0, f"{self.path} still has {self.free()} bytes free after the filler"

    def drain(self) -> None:
        """Room again: the filler goes and the file system has its first size back."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.filler)
        done = self._remount(self.size)
        assert done.returncode == 0, f"cannot resize the tmpfs at {self.path} to {self.size}: {done.stdout}"


@contextlib.contextmanager
def full_disk(path: str, size: str = "2m") -> Iterator[FullDisk]:
    """A tmpfs of ``size`` at ``path`` (empty, not yet filled: call ``fill``), unmounted afterwards."""
    with tmpfs(path, size) as mounted:
        yield FullDisk(mounted, size)
