"""Files a reader never sees half of (atomic writes, JSON records), and the tool's generic file moves."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import inspect
import itertools
import json
import os
import shutil
import stat
import tempfile
import time
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import filelock

from ensure_flydsl.support.fields import json_object
from ensure_flydsl.warm import read_regular as read_regular

LOCK_REPORT_S = 30.0  # a wait for a lock names its holder this often


def atomic_write(path: str, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one, never a part."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        move_into_place(tmp, path, mode, durable=durable)
    except BaseException as exc:
        remove_quietly([tmp])
        if isinstance(exc, OSError) and exc.filename is None:
            # A full disk fails the write or the close, which name no file: the same error, saying which.
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def move_into_place(tmp: str, path: str, mode: int = 0o644, *, durable: bool = True) -> None:
    """Rename the complete file ``tmp`` over ``path`` (same folder) with ``mode``, replacing a link, never following
    it; ``durable`` flushes the file and the folder, so a power cut leaves the old file or the new one."""
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if durable:
            os.fsync(fd)
        os.fchmod(fd, mode)  # never world-writable, whatever the umask
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def json_bytes(obj: object) -> bytes:
    """The tool's JSON files as written: indented, keys sorted, one final line break."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def atomic_write_json(path: str, obj: object) -> None:
    atomic_write(path, json_bytes(obj))


def read_json(path: str) -> Optional[Dict[str, object]]:
    """The JSON object in the regular file ``path``, or None (missing, torn, foreign, nested too deep)."""
    raw = read_regular(path)
    try:
        return None if raw is None else json_object(raw)
    except ValueError:
        return None


def file_path_problem(path: str, *, symlink_ok: bool) -> Optional[str]:
    """Why the tool cannot write (or lock) a file at ``path`` (a device or a folder there would be replaced), or
    None; a symlink is refused where the tool opens the path, fine where it renames a new file over it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect it: {exc.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return None if symlink_ok else "it is a symbolic link; use a plain file path"
    if not stat.S_ISREG(st.st_mode):
        return "it exists and is not a regular file (writing there would replace it)"
    return None


def remove_file(path: str) -> bool:
    """Remove a file the tool wrote; return whether it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def remove_quietly(paths: Sequence[str]) -> None:
    """Remove each of ``paths`` that can go; the rest stays as it is."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries to disk; best effort (some file systems refuse)."""
    with contextlib.suppress(OSError):
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def rename_into_place(src: str, dest: str) -> None:
    """Publish ``src`` as ``dest`` (same file system) in one rename, then flush the folder's entry; a ``dest`` that
    is a non-empty folder is refused (OSError), never merged into."""
    os.rename(src, dest)
    fsync_dir(os.path.dirname(dest) or ".")


def move_aside(path: str) -> str:
    """Rename a folder the tool did not create out of the way (never delete it); return the new name."""
    stem = f"{path}.moved-by-ensure-flydsl-{time.strftime('%Y%m%d-%H%M%S')}"
    names = itertools.chain([stem], (f"{stem}-{n}" for n in itertools.count(1)))
    target = next(name for name in names if not os.path.lexists(name))
    os.rename(path, target)
    return target


def folder_bytes(folder: str) -> int:
    """The bytes of the files under ``folder`` (a file that goes away meanwhile, a gc's, counts nothing)."""
    total = 0
    for top, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def remove_tree(path: str) -> None:
    """Delete a folder this tool created (callers prove that first); a missing folder is fine."""
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)


def file_sha256(path: str) -> Optional[str]:
    """A file's sha256 (hex), or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


class LockBusy(Exception):
    """A lock another process still held when the wait for it ran out."""


@contextlib.contextmanager
def held_lock(path: str, *, timeout: Optional[float], say: Callable[[str], None], what: str,
              holder: Optional[Callable[[], str]] = None) -> Iterator[None]:
    """The lock file ``path`` (made if missing, never deleted) held for the body, waited for at most ``timeout`` s
    (None: for ever), its holder named every 30 s; OSError for anything but a regular file there (a FIFO hangs)."""
    problem = file_path_problem(path, symlink_ok=False)
    if problem is not None:
        raise OSError(errno.EINVAL, f"{problem}, so it cannot be a lock", path)
    kwargs: Dict[str, object] = {"mode": 0o644}
    # filelock >= 4 may unlink the lock file on release unless told not to; 3.x never does.
    if "preserve_lock_file" in inspect.signature(filelock.FileLock.__init__).parameters:
        kwargs["preserve_lock_file"] = True
    lock = filelock.FileLock(path, **kwargs)  # type: ignore[arg-type]
    started, chunk = time.monotonic(), 0.0
    while True:
        try:
            lock.acquire(timeout=chunk, poll_interval=0.05)
            break
        except filelock.Timeout:
            waited, who = time.monotonic() - started, (holder or functools.partial(flock_holder, path))()
            if timeout is not None and waited >= timeout:
                raise LockBusy(f"could not take {what} {path} within {timeout:g} s: it is held by {who}") from None
            limit = "as long as it takes" if timeout is None else f"up to {timeout:g} s"
            say(f"waiting for {what} {path}, held by {who}; waited {waited:.0f} s, waiting {limit}")
            chunk = LOCK_REPORT_S if timeout is None else max(0.0, min(LOCK_REPORT_S, timeout - waited))
    try:
        yield
    finally:
        lock.release()


def flock_holder(path: str) -> str:
    """Who holds the flock on the file at ``path``, from /proc/locks (Linux), for a person to look at."""
    pids: List[str] = []
    with contextlib.suppress(OSError), open("/proc/locks") as handle:
        inode = str(os.stat(path).st_ino)
        for line in handle:  # a waiter's line has "->" before FLOCK: not taken
            parts = line.split()
            if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].rsplit(":", 1)[-1] == inode:
                pids.append(parts[4])
    named = []
    for pid in pids[:3]:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as handle:
            pid += f" ({handle.read().strip()[:32]})"
        named.append(f"pid {pid}")
    return ", ".join(named) or "another process"
