"""Where a shared store's bytes live, each file written atomically: a folder (no link below its root followed), or
any fsspec file system, ``down`` for the rest of the run once it fails (one timeout per run, not one per step)."""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import importlib
import os
import stat
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from typing import IO, Any, Dict, Iterator, List, Optional, Union, cast

from ensure_flydsl.support.files import atomic_write, move_into_place, remove_file
from ensure_flydsl.support.launcher import extra_remedy
from ensure_flydsl.support.processes import heartbeat, network_silence_s, waiting_line
from ensure_flydsl.support.urls import shown_location

READ_BLOCK = 8 << 20  # what an fsspec file reads ahead when a blob streams (s3fs would buffer 50 MiB)
# Uploads that appear whole or not at all (a PUT; a multipart upload).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
REMOTE_RETRIES = 1  # s3fs's own attempts over botocore's two: six minutes of silence were seen with the defaults
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC


class CacheError(Exception):
    """The store cannot be used (bad location, missing extra, no access); the message says what to do."""


class CacheUnreachable(CacheError):
    """The store's remote cannot be reached or is misconfigured; remembered for the run (``down``)."""


class CacheCorrupt(CacheError):
    """An entry that failed verification; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the store's root, "/"-separated
    size: int
    mtime: Optional[float]  # None when the file system does not say


def bounded(data: bytes, rel: str, limit: int) -> bytes:
    """``data`` (read as ``limit + 1`` bytes at most): CacheCorrupt when more than ``limit``."""
    if len(data) > limit:
        raise CacheCorrupt(f"{rel} is larger than {limit} bytes, which no record of this tool is")
    return data


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


class FolderStore:
    """A store in a local (or NFS) folder, with plain os calls (a bare image needs no extra)."""

    def __init__(self, root: str) -> None:
        root = os.path.abspath(root)
        if os.path.exists(root) and not os.path.isdir(root):
            raise CacheError(f"the cache location {root} is not a folder; point FLYDSL_CACHE at a folder or an "
                             "fsspec URL such as s3://bucket/prefix")
        self.root = self.location = root
        self.down: Optional[str] = None  # a folder is there or not: never down for a run
        self.read_only = os.path.isdir(root) and not os.access(root, os.W_OK | os.X_OK)

    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def _folder(self, rel_dir: str, create: bool = False) -> str:
        """``rel_dir`` under the root (made when ``create``); CacheError for a link or non-folder on the way."""
        path = self.root
        if create and not os.path.isdir(path):
            try:
                os.makedirs(path, 0o755, exist_ok=True)
            except OSError as exc:
                raise CacheError(f"cannot create the cache folder {path}: {exc.strerror or exc}; point "
                                 "FLYDSL_CACHE elsewhere") from None
        for part in (p for p in rel_dir.split("/") if p):
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                if not create:
                    return self._abs(rel_dir)  # nothing below it exists
                try:
                    os.mkdir(path, 0o755)
                    continue
                except FileExistsError:
                    st = os.lstat(path)
                except OSError as exc:
                    raise _unwritable(f"to the cache folder {os.path.dirname(path)}", exc) from None
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

    def open_read(self, rel: str) -> IO[bytes]:
        """``rel`` opened for reading; CacheCorrupt when not a regular file (a planted FIFO would block for ever)."""
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

    def read_bytes(self, rel: str, limit: int) -> Optional[bytes]:
        """The file's bytes, None when absent; CacheCorrupt past ``limit`` (only that much more is read)."""
        try:
            with self.open_read(rel) as handle:
                data = handle.read(limit + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CacheError(f"cannot read {self._abs(rel)} in the cache: {exc.strerror or exc}") from None
        return bounded(data, rel, limit)

    def exists(self, rel: str) -> bool:
        try:
            return stat.S_ISREG(os.lstat(self._file(rel)).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise CacheError(f"cannot look at {self._abs(rel)} in the cache: {exc.strerror or exc}") from None

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        found: List[StoredFile] = []
        for folder, _dirs, names in os.walk(self._folder(rel_dir)):  # os.walk enters no link
            for name in names:
                full = os.path.join(folder, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue  # pruned meanwhile
                found.append(StoredFile(os.path.relpath(full, self.root).replace(os.sep, "/"), st.st_size,
                                        st.st_mtime))
        return found

    def list_names(self, rel_dir: str) -> List[str]:
        """Every name in ``rel_dir``, whatever stands there (a create of any of them fails); [] when absent."""
        top = self._folder(rel_dir)
        try:
            return os.listdir(top)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise CacheError(f"cannot list {top} in the cache: {exc.strerror or exc}") from None

    def new_upload(self, rel_dir: str) -> str:
        """A temporary file in the target folder, so that committing it is a rename."""
        folder = self._folder(rel_dir, create=True)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".upload.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise _unwritable(f"to the cache folder {folder}", exc) from None
        os.close(fd)
        return tmp

    def commit_upload(self, tmp: str, rel: str) -> None:
        move_into_place(tmp, self._file(rel), 0o644)  # flushed first: a manifest never names lost bytes

    def put_bytes(self, rel: str, data: bytes) -> None:
        path = self._file(rel, create_parent=True)
        try:
            atomic_write(path, data, 0o644)
        except OSError as exc:
            raise _unwritable(path, exc) from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists (False): link(2) of a whole file is atomic, on NFS too."""
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
                remove_file(tmp)
        except OSError as exc:
            raise _unwritable(path, exc) from None

    def remove(self, rel: str) -> None:
        path = self._file(rel)
        try:
            os.unlink(path)  # a link itself, never what it points to
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            raise CacheError(f"cannot remove {path} from the cache: {exc.strerror or exc}") from None


def _unwritable(what: str, exc: OSError) -> CacheError:
    return CacheError(f"cannot write {what}: {exc.strerror or exc}; make the cache folder writable or point "
                      "FLYDSL_CACHE elsewhere")


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def remote_options(protocol: str) -> Dict[str, object]:
    """Timeouts and few retries: a silent endpoint fails within the network silence limit."""
    silence = network_silence_s()
    if protocol in ("s3", "s3a"):
        half = max(1.0, silence / 2)
        return {"config_kwargs": {"connect_timeout": min(10.0, half), "read_timeout": half,
                                  "retries": {"mode": "standard", "total_max_attempts": 2}}}
    if protocol in ("ftp", "sftp"):
        return {"timeout": silence}
    return {}


class FsspecStore:
    """A store behind an fsspec URL; any failure of the remote (credentials, network) becomes a CacheError."""

    def __init__(self, location: str) -> None:
        self.location = shown_location(location)  # what messages name; the URL itself is only connected to
        try:
            fsspec: Any = importlib.import_module("fsspec")
        except ImportError:
            raise CacheError(f"the cache {self.location} is a URL, which needs fsspec: "
                             + extra_remedy("s3", "point FLYDSL_CACHE at a folder")) from None
        self.read_only = False  # known only by trying: a refused write is reported where it happens
        self.down: Optional[str] = None
        scheme = location.split("://", 1)[0].lower()
        self.atomic_put = scheme in OBJECT_STORES
        self.fs: Any = None
        self.root = ""
        try:
            # An own instance with no listing cache: other hosts publish and prune under us.
            fs, root = fsspec.core.url_to_fs(location, skip_instance_cache=True, use_listings_cache=False,
                                             **remote_options(scheme))
        except ImportError as exc:
            raise CacheError(f"the cache {self.location} needs a package fsspec could not import ({exc}): "
                             + extra_remedy("s3", "point FLYDSL_CACHE at a folder")) from None
        except (ValueError, TypeError) as exc:
            raise CacheError(f"the cache location {self.location} cannot be used: {exc}; use a folder or a URL such "
                             "as s3://bucket/prefix") from None
        except Exception as exc:  # a file system that connects when made (FTP, SFTP): down, said once
            self.down = f"cannot connect to the cache {self.location}: {self._why(exc)}"
            return
        if hasattr(fs, "retries"):
            fs.retries = REMOTE_RETRIES
        self.fs = fs
        self.root = str(root).rstrip("/")
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        self.atomic_put = any(p in OBJECT_STORES for p in protocols)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    @contextlib.contextmanager
    def _remote(self, what: str, *, writing: bool = False) -> Iterator[None]:
        """An operation on the remote, said while it waits; any failure is CacheUnreachable (never exit 70)."""
        if self.down is not None:
            raise CacheUnreachable(self.down)
        limit = network_silence_s()
        started = time.monotonic()
        waiting = threading.Timer(limit / 2, lambda: heartbeat(
            "cache: " + waiting_line(what, self.location, time.monotonic() - started, time.monotonic() - started,
                                     limit)))
        waiting.daemon = True
        waiting.start()
        try:
            yield
            return
        except FileNotFoundError:
            if not writing:
                raise  # a miss
            why = "its bucket or folder does not exist; create it, or point FLYDSL_CACHE at one that does"
        except (CacheError, FileExistsError):
            raise
        except Exception as exc:
            why = self._why(exc)
        finally:
            waiting.cancel()
        self.down = f"cannot {what} in the cache {self.location}: {why}"
        raise CacheUnreachable(self.down) from None

    def _why(self, exc: Exception) -> str:
        """A failure of the remote in one line, with what to check."""
        text = " ".join(str(exc).split())
        if self.location.split("://", 1)[0].lower() in ("s3", "s3a"):
            advice = "check the credentials and the endpoint (AWS_ENDPOINT_URL_S3)"
        else:
            advice = "check the URL's host, port and credentials, and that its server answers"
        return f"{type(exc).__name__}: {text if len(text) <= 300 else text[:297] + '...'}; {advice}"

    def _make_parent(self, target: str) -> None:
        """The folder of ``target`` where folders exist; another host making it at once is no failure."""
        if self.atomic_put:
            return
        parent = target.rsplit("/", 1)[0]
        tries = parent.count("/") + 2  # once per level: the other host may not have made the deeper ones yet
        for attempt in range(1, tries + 1):
            try:
                self.fs.makedirs(parent, exist_ok=True)
                return
            except Exception:
                if self.fs.isdir(parent):
                    return
                if attempt == tries:
                    raise

    def read_bytes(self, rel: str, limit: int) -> Optional[bytes]:
        try:
            with self._remote(f"read {rel}"):
                data = bytes(self.fs.cat_file(self._path(rel), start=0, end=limit + 1))
        except FileNotFoundError:
            return None
        return bounded(data, rel, limit)

    @contextlib.contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        with self._remote(f"read {rel}"):
            handle = self.fs.open(self._path(rel), "rb", block_size=READ_BLOCK)
        try:
            yield cast(IO[bytes], _RemoteReader(self, rel, handle))
        finally:
            with contextlib.suppress(Exception):
                handle.close()

    def exists(self, rel: str) -> bool:
        with self._remote(f"look for {rel}"):
            return bool(self.fs.exists(self._path(rel)))

    def new_upload(self, rel_dir: str) -> str:
        fd, tmp = tempfile.mkstemp(prefix="ensure-flydsl-upload.", suffix=".tmp")
        os.close(fd)
        return tmp

    def commit_upload(self, tmp: str, rel: str) -> None:
        with self._remote(f"upload {rel}", writing=True):  # the caller removes ``tmp``
            self._put(rel, lambda target: self.fs.put_file(tmp, target))

    def put_bytes(self, rel: str, data: bytes) -> None:
        with self._remote(f"upload {rel}", writing=True):
            self._put(rel, lambda target: self.fs.pipe_file(target, data))

    def _put(self, rel: str, write: Any) -> None:
        """One PUT where that is atomic; elsewhere a write beside the target, then a move."""
        target = self._path(rel)
        if self.atomic_put:
            write(target)
            return
        self._make_parent(target)
        staged = f"{target}.{uuid.uuid4().hex}.tmp"
        write(staged)
        self.fs.mv(staged, target)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists (S3's ``If-None-Match: *``): False then; the lease probes support."""
        target = self._path(rel)
        try:
            with self._remote(f"create {rel}", writing=True):
                self._make_parent(target)
                with self.fs.open(target, "xb") as handle:
                    handle.write(data)
        except FileExistsError:
            return False
        return True

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        try:
            with self._remote(f"list {rel_dir}"):
                found = self.fs.find(self._path(rel_dir), detail=True)
        except FileNotFoundError:
            return []
        prefix = self.root + "/" if self.root else ""
        return [StoredFile(str(name)[len(prefix):], int(info.get("size") or 0), _mtime(info))
                for name, info in found.items()
                if info.get("type") != "directory" and str(name).startswith(prefix)]

    def list_names(self, rel_dir: str) -> List[str]:
        """The names in ``rel_dir`` a create collides with (on an object store, objects alone)."""
        top = self._path(rel_dir).rstrip("/")
        try:
            with self._remote(f"list {rel_dir}"):
                found = self.fs.ls(top, detail=True)
        except FileNotFoundError:
            return []
        names = set()
        for info in found:
            name = str(info.get("name") or "").rstrip("/")
            if name.startswith(top + "/") and not (self.atomic_put and info.get("type") == "directory"):
                names.add(name[len(top) + 1:])
        return sorted(names)

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError), self._remote(f"remove {rel}"):
            self.fs.rm_file(self._path(rel))


class _RemoteReader:
    """A remote file whose reads fail as the store's other calls do."""

    def __init__(self, store: FsspecStore, rel: str, handle: Any) -> None:
        self._store, self._rel, self._handle = store, rel, handle

    def read(self, size: int = -1) -> bytes:
        with self._store._remote(f"read {self._rel}"):
            return bytes(self._handle.read(size))


def _mtime(info: Any) -> Optional[float]:
    """The modification time in an fsspec info dict; each file system names it differently."""
    for field in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(field)
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime.datetime):
            return value.timestamp()
    return None


Store = Union[FolderStore, FsspecStore]


def open_store(location: str) -> Store:
    """A folder path (or a ``file://`` URL) gives a FolderStore; any other URL an FsspecStore."""
    if location.startswith("file://") or "://" not in location:
        return FolderStore(location[len("file://"):] if location.startswith("file://") else location)
    return FsspecStore(location)
