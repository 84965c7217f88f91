"""A cache in a local (or NFS) folder, with plain os calls (no fsspec import: a bare image needs no extra).

Everything under the cache's root is somebody else's data, written by any host and user that shares the
folder, so nothing there is trusted:

- **No link is followed under the root.**  Every folder between the root and a file is looked at with
  lstat (a link there, ``blobs`` or ``leases/tree`` pointing elsewhere, is refused: writes and the lease's
  clean-up would go there), and files are opened with O_NOFOLLOW.  The root itself may be a link (the
  user's own setting).
- **Only regular files are opened**, with O_NONBLOCK and checked with fstat: a FIFO planted as a blob
  would otherwise block the read forever, holding the root's lock.
- **A folder this user cannot write in is used read-only** (``read_only``): entries are fetched, nothing
  is published and no lease is taken (ways/cache/provider.py says so once).

A refused file (a link, a FIFO) is :class:`CacheCorrupt`: its entry or lease record is built around.  A
refused folder is :class:`CacheError`: the operation is reported and the run goes on without it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from typing import IO, Iterator, List, Optional

from ensure_flydsl.binary_cache.stored import CacheCorrupt, CacheError, StoredFile, bounded
from ensure_flydsl.support.files import atomic_write, move_into_place

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


class FolderStore:
    """A cache in a local (or NFS) folder."""

    def __init__(self, root: str) -> None:
        root = os.path.abspath(root)
        if os.path.exists(root) and not os.path.isdir(root):
            raise CacheError(f"the cache location {root} is not a folder; point FLYDSL_CACHE at a folder or an "
                             "fsspec URL such as s3://bucket/prefix")
        self.root = root
        self.location = root
        self.down: Optional[str] = None  # a folder is there or not: never "unreachable for this run"
        # A folder that exists but that this user may not write in (another user's, a read-only mount).
        self.read_only = os.path.isdir(root) and not os.access(root, os.W_OK | os.X_OK)

    # -- paths: never through a link ------------------------------------------------------------------
    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def _folder(self, rel_dir: str, create: bool = False) -> str:
        """The folder ``rel_dir`` under the root, each component checked with lstat (and made when
        ``create``); CacheError when one is a link or not a folder.  A missing component ends the check:
        nothing below it exists."""
        path = self.root
        if create and not os.path.isdir(path):
            try:
                os.makedirs(path, 0o755, exist_ok=True)  # the root itself: the user's setting, may be a link
            except OSError as exc:
                raise CacheError(f"cannot create the cache folder {path}: {exc.strerror or exc}; point "
                                 "FLYDSL_CACHE elsewhere") from None
        for part in (p for p in rel_dir.split("/") if p):
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    return self._abs(rel_dir)
                try:
                    os.mkdir(path, 0o755)
                    continue
                except FileExistsError:
                    st = os.lstat(path)
                except OSError as exc:
                    raise CacheError(f"cannot write to the cache folder {os.path.dirname(path)}: "
                                     f"{exc.strerror or exc}; make it writable or point FLYDSL_CACHE "
                                     "elsewhere") from None
            except OSError as exc:
                raise CacheError(f"cannot look at {path} in the cache: {exc.strerror or exc}") from None
            if stat.S_ISLNK(st.st_mode):
                raise CacheError(f"{path} in the cache is a symbolic link (to {_readlink(path)}); the cache never "
                                 f"follows a link under its root {self.root}: remove the link (the tool made none)")
            if not stat.S_ISDIR(st.st_mode):
                raise CacheError(f"{path} in the cache is {_kind(st.st_mode)}, not a folder; remove it (the tool "
                                 "made none)")
        return path

    def _file(self, rel: str, create_parent: bool = False) -> str:
        parent, _, name = rel.rpartition("/")
        return os.path.join(self._folder(parent, create_parent), name)

    def _open_regular(self, rel: str) -> IO[bytes]:
        """``rel`` opened for reading if it is a regular file: FileNotFoundError when absent, CacheCorrupt when
        it is a link, a FIFO, a device... (opened without blocking and without following a link)."""
        path = self._file(rel)
        try:
            fd = os.open(path, _READ_FLAGS)
        except NotADirectoryError:
            raise FileNotFoundError(path) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CacheCorrupt(f"{path} in the cache is a symbolic link; the cache never follows one") from None
            if exc.errno == errno.ENOENT:
                raise
            raise CacheError(f"cannot read {path} in the cache: {exc.strerror or exc}") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise CacheCorrupt(f"{path} in the cache is {_kind(mode)}, not a regular file")
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    # -- reading ----------------------------------------------------------------------------------------
    def read_bytes(self, rel: str, limit: int) -> Optional[bytes]:
        """The file's bytes, or None when it does not exist; CacheCorrupt past ``limit`` bytes (only that much
        more is read: a planted file is never trusted to be small)."""
        try:
            with self._open_regular(rel) as handle:
                data = handle.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheError(f"cannot read {self._abs(rel)} in the cache: {exc.strerror or exc}") from None
        return bounded(data, rel, limit)

    @contextlib.contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        with self._open_regular(rel) as handle:
            yield handle

    def exists(self, rel: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(self._file(rel)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise CacheError(f"cannot look at {self._abs(rel)} in the cache: {exc.strerror or exc}") from None

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        top = self._folder(rel_dir)
        found: List[StoredFile] = []
        for folder, _dirs, names in os.walk(top):  # os.walk does not descend into links
            for name in names:
                full = os.path.join(folder, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue  # removed meanwhile (a concurrent prune)
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                found.append(StoredFile(rel, st.st_size, st.st_mtime))
        return found

    def list_names(self, rel_dir: str) -> List[str]:
        """Every name directly in the folder ``rel_dir``, whatever stands at it (a file, a folder, a link to
        one, a dangling link, a FIFO): a create of any of them fails.  Empty when the folder does not exist."""
        top = self._folder(rel_dir)
        try:
            return os.listdir(top)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise CacheError(f"cannot list {top} in the cache: {exc.strerror or exc}") from None

    # -- writing ----------------------------------------------------------------------------------------
    def new_upload(self, rel_dir: str) -> str:
        """A temporary local file to write an upload into: in the target folder, so committing is a rename."""
        folder = self._folder(rel_dir, create=True)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".upload.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise CacheError(f"cannot write to the cache folder {folder}: {exc.strerror or exc}; make it writable "
                             "or point FLYDSL_CACHE elsewhere") from None
        os.close(fd)
        return tmp

    def commit_upload(self, tmp: str, rel: str) -> None:
        # fsync before the rename: after a power cut a manifest must never name a blob whose bytes are lost.
        move_into_place(tmp, self._file(rel), 0o644)

    def discard_upload(self, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    def put_bytes(self, rel: str, data: bytes) -> None:
        path = self._file(rel, create_parent=True)
        try:
            atomic_write(path, data, 0o644)
        except OSError as exc:
            raise CacheError(f"cannot write {path}: {exc.strerror or exc}; make the cache folder writable or "
                             "point FLYDSL_CACHE elsewhere") from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` holding ``data`` unless it exists; False when it does.  A link of a complete
        temporary file: readers never see it half written, and link(2) fails with EEXIST atomically,
        on NFS too (the classic lock-file technique); it does not follow a link at the target."""
        path = self._file(rel, create_parent=True)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".create.", suffix=".tmp", dir=os.path.dirname(path))
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.chmod(tmp, 0o644)
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        except OSError as exc:
            raise CacheError(f"cannot write {path}: {exc.strerror or exc}; make the cache folder writable or "
                             "point FLYDSL_CACHE elsewhere") from None

    def remove(self, rel: str) -> None:
        path = self._file(rel)
        try:
            os.unlink(path)  # a link itself, never what it points to
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise CacheError(f"cannot remove {path} from the cache: {exc.strerror or exc}") from None


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"
