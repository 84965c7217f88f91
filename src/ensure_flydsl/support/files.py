"""Files written so that a reader never sees half of one (atomic writes, JSON records, paths), and the tool's
generic file moves: a folder moved aside, a tree removed, a folder's entries flushed to disk."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from typing import Dict, Optional, Sequence, Tuple


def atomic_write(path: str, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the whole new one, never a part.

    The temporary file lives in the same folder (same file system, so the rename is atomic), is flushed
    to disk before the rename (unless not ``durable``: see :func:`move_into_place`), and its mode is set
    explicitly (never world-writable, whatever the umask).
    """

    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        move_into_place(tmp, path, mode, durable=durable)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:
            # A full disk fails the write or the close, which name no file: the same error, saying which.
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def move_into_place(tmp: str, path: str, mode: int = 0o644, *, durable: bool = True) -> None:
    """Stage-then-move's move: ``tmp``, a complete file in ``path``'s folder (same file system, so the rename
    is atomic), is flushed to disk and given ``mode`` (never world-writable, whatever the umask), renamed over
    ``path`` (a link planted at ``path`` is replaced, never followed), and the folder's entry is flushed: after
    a power cut ``path`` holds the old file or the whole new one.

    Not ``durable``: the same rename without the two flushes (about half a millisecond each on a disk), for a
    file rewritten many times a minute whose loss in a power cut costs nothing (a run's progress: the run
    died with the power anyway).  A reader still sees the old file or the whole new one."""
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        if durable:
            os.fsync(fd)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def json_bytes(obj: object) -> bytes:
    """The tool's JSON files as written: indented, keys sorted, one final line break."""

    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def atomic_write_json(path: str, obj: object, mode: int = 0o644) -> None:
    atomic_write(path, json_bytes(obj), mode)


def atomic_write_all(writes: Sequence[Tuple[str, bytes]], *, undo: Sequence[str]) -> None:
    """Write each ``(path, data)`` whole (:func:`atomic_write`), in order: all of them, or, when one fails, none
    of those ``undo`` names (each removed where it can be; what cannot go is left) before the error propagates."""
    try:
        for path, data in writes:
            atomic_write(path, data)
    except BaseException:
        remove_quietly(undo)
        raise


# The tool's own files (markers, twins, records, stamps, the env file) hold a few KB; a larger one is not
# the tool's.
MAX_OWN_FILE_BYTES = 16 << 20


def read_regular(path: str, limit: int = MAX_OWN_FILE_BYTES) -> Optional[bytes]:
    """The bytes of the regular file ``path``, or None when it is missing, unreadable, not a regular file or
    larger than ``limit``.  Opened without blocking and checked before reading: a FIFO planted at one of the
    tool's paths would otherwise hang every caller that looks (the warm path first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1  # the handle closes it
            raw = handle.read(limit + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    return raw if len(raw) <= limit else None


def read_head(path: str, size: int) -> Optional[bytes]:
    """The first ``size`` bytes of the regular file ``path`` (all of it when shorter), or None when it is
    missing, unreadable or not a regular file; opened without blocking, as :func:`read_regular`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json(path: str) -> Optional[Dict[str, object]]:
    """The JSON object in ``path``, or None when it is missing or not a JSON object (a torn or foreign file,
    or not a regular file: ``read_regular``; nesting too deep for the decoder, which raises RecursionError)."""
    raw = read_regular(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode())
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def file_path_problem(path: str, *, symlink_ok: bool) -> Optional[str]:
    """Why ``path`` cannot be a file the tool writes (or locks), or None when it is absent or a plain file.

    A device or a folder there would be replaced (FLYDSL_BUILD_FAILED=/dev/null, as root, would turn the
    device into a JSON file).  A symlink is refused where the tool opens the path (a lock, a log): it would
    redirect the write or the lock to somebody else's file; it is fine where the tool only renames a new
    file over the path, which replaces the link itself.
    """
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
    """Remove each of ``paths`` that is there (what is gone already, or cannot go, is left as it is)."""
    for path in paths:
        try:
            remove_file(path)
        except OSError:
            pass


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries (a rename into it) to disk; best effort (some file systems refuse)."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def rename_into_place(src: str, dest: str) -> None:
    """Publish what was made whole beside ``dest`` (a folder, or a file already flushed), on the same file
    system: one rename, so a reader finds the old entry or the new one, never a part; then the folder's
    entry is flushed, so a power cut does not undo it.  A ``dest`` that is a non-empty folder is refused
    (OSError), never merged into."""
    os.rename(src, dest)
    fsync_dir(os.path.dirname(dest) or ".")


def move_aside(path: str) -> str:
    """Rename a folder the tool did not create out of the way (never delete it); return the new name."""

    target = f"{path}.moved-by-ensure-flydsl-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 0
    while os.path.lexists(target):
        n += 1
        target = f"{path}.moved-by-ensure-flydsl-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    os.rename(path, target)
    return target


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
