"""Where the binary cache's bytes live: a plain folder, or any fsspec file system (``s3://bucket/prefix``).

A store knows nothing about manifests or tarballs; it reads, lists and removes files by their path
relative to the cache's root, and writes each one atomically: a reader sees the whole file or none.

- Folder: a temporary file in the target folder, fsync'd, then ``os.replace``.  No fsspec import, so a
  local cache works on a bare image without the ``s3`` extra.
- Object stores (S3, GCS, Azure): a single PUT.  An object, multipart uploads included, becomes visible
  only once complete; a copy-and-delete "rename" would only double the traffic.
- Other fsspec file systems (sftp, ...): upload to a temporary name beside the target, then ``mv``.

fsspec is imported only for a URL; without it (or without the protocol's package, s3fs for ``s3://``)
:func:`open_store` raises CacheError naming the extra to install.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib
import os
import tempfile
import uuid
from typing import IO, Any, Iterator, List, Optional, Union

from ensure_flydsl.support.files import atomic_write

INSTALL_HINT = "install the extra: pip install 'ensure-flydsl[s3]' (fsspec and s3fs)"
READ_BLOCK = 8 << 20  # bytes an fsspec file reads ahead when streaming a blob
# Protocols whose uploads are atomic by themselves (a PUT, or a multipart upload, appears whole or not at all).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})


class CacheError(Exception):
    """The cache cannot be used at all (bad location, missing extra, no access); the message says what to do."""


class CacheCorrupt(CacheError):
    """An entry that failed verification; ``reason`` is one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class StoredFile:
    path: str  # relative to the cache's root, "/"-separated
    size: int
    mtime: Optional[float]  # None when the file system does not say


class FolderStore:
    """A cache in a local (or NFS) folder, with plain os calls."""

    def __init__(self, root: str) -> None:
        root = os.path.abspath(root)
        if os.path.exists(root) and not os.path.isdir(root):
            raise CacheError(f"the cache location {root} is not a folder; point FLYDSL_CACHE at a folder or an "
                             "fsspec URL such as s3://bucket/prefix")
        self.root = root
        self.location = root

    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, *rel.split("/"))

    def read_bytes(self, rel: str) -> Optional[bytes]:
        try:
            with open(self._abs(rel), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise CacheError(f"cannot read {self._abs(rel)} in the cache: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        with open(self._abs(rel), "rb") as handle:
            yield handle

    def exists(self, rel: str) -> bool:
        return os.path.isfile(self._abs(rel))

    def new_upload(self, rel_dir: str) -> str:
        """A temporary local file to write an upload into: in the target folder, so committing is a rename."""
        folder = self._abs(rel_dir)
        try:
            os.makedirs(folder, mode=0o755, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".upload.", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise CacheError(f"cannot write to the cache folder {folder}: {exc.strerror or exc}; make it writable "
                             "or point FLYDSL_CACHE elsewhere") from None
        os.close(fd)
        return tmp

    def commit_upload(self, tmp: str, rel: str) -> None:
        # fsync before the rename: after a power cut a manifest must never name a blob whose bytes are lost.
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, self._abs(rel))
        with contextlib.suppress(OSError):
            dfd = os.open(os.path.dirname(self._abs(rel)), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def discard_upload(self, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    def put_bytes(self, rel: str, data: bytes) -> None:
        path = self._abs(rel)
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            atomic_write(path, data, 0o644)
        except OSError as exc:
            raise CacheError(f"cannot write {path}: {exc.strerror or exc}; make the cache folder writable or "
                             "point FLYDSL_CACHE elsewhere") from None

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` holding ``data`` unless it exists; False when it does.  A link of a complete
        temporary file: readers never see it half written, and link(2) fails with EEXIST atomically,
        on NFS too (the classic lock-file technique)."""
        path = self._abs(rel)
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
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

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        top = self._abs(rel_dir)
        found: List[StoredFile] = []
        for folder, _dirs, names in os.walk(top):
            for name in names:
                full = os.path.join(folder, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue  # removed meanwhile (a concurrent prune)
                rel = os.path.relpath(full, self.root).replace(os.sep, "/")
                found.append(StoredFile(rel, st.st_size, st.st_mtime))
        return found

    def remove(self, rel: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._abs(rel))


class FsspecStore:
    """A cache behind an fsspec URL.  Any failure of the remote (credentials, network) becomes CacheError."""

    def __init__(self, location: str) -> None:
        try:
            fsspec: Any = importlib.import_module("fsspec")
        except ImportError:
            raise CacheError(f"the cache {location} is a URL, which needs fsspec: {INSTALL_HINT}, or point "
                             "FLYDSL_CACHE at a folder") from None
        try:
            # Own instance (fsspec shares one per URL otherwise) and no listing cache: another process or
            # host publishes and prunes under us, and a stale listing would hide or resurrect entries.
            fs, root = fsspec.core.url_to_fs(location, skip_instance_cache=True, use_listings_cache=False)
        except ImportError as exc:
            raise CacheError(f"the cache {location} needs a package fsspec could not import ({exc}): "
                             f"{INSTALL_HINT}") from None
        except (ValueError, TypeError) as exc:
            raise CacheError(f"the cache location {location} cannot be used: {exc}; use a folder or a URL such "
                             "as s3://bucket/prefix") from None
        self.fs: Any = fs
        self.root = str(root).rstrip("/")
        self.location = location
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        self.atomic_put = any(p in OBJECT_STORES for p in protocols)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    @contextlib.contextmanager
    def _remote(self, what: str) -> Iterator[None]:
        # botocore and aiohttp raise their own exception types (NoCredentialsError, EndpointConnectionError,
        # ClientError...), not OSError; without this a missing credential would end the run with exit 70.
        try:
            yield
        except (CacheError, FileNotFoundError, FileExistsError):
            raise
        except Exception as exc:
            raise CacheError(f"cannot {what} in the cache {self.location}: {type(exc).__name__}: {exc}; "
                             "check the credentials and the endpoint (AWS_ENDPOINT_URL_S3)") from None

    def read_bytes(self, rel: str) -> Optional[bytes]:
        try:
            with self._remote(f"read {rel}"):
                return bytes(self.fs.cat_file(self._path(rel)))
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        # A bounded read-ahead: a fetch streams the blob, and s3fs would otherwise buffer 50 MiB blocks.
        with self._remote(f"read {rel}"), self.fs.open(self._path(rel), "rb", block_size=READ_BLOCK) as handle:
            yield handle

    def exists(self, rel: str) -> bool:
        with self._remote(f"look for {rel}"):
            return bool(self.fs.exists(self._path(rel)))

    def new_upload(self, rel_dir: str) -> str:
        fd, tmp = tempfile.mkstemp(prefix="ensure-flydsl-upload.", suffix=".tmp")
        os.close(fd)
        return tmp

    def commit_upload(self, tmp: str, rel: str) -> None:
        try:
            with self._remote(f"upload {rel}"):
                target = self._path(rel)
                if self.atomic_put:
                    self.fs.put_file(tmp, target)
                else:
                    self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                    staged = f"{target}.{uuid.uuid4().hex}.tmp"
                    self.fs.put_file(tmp, staged)
                    self.fs.mv(staged, target)
        finally:
            self.discard_upload(tmp)

    def discard_upload(self, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    def put_bytes(self, rel: str, data: bytes) -> None:
        with self._remote(f"upload {rel}"):
            target = self._path(rel)
            if self.atomic_put:
                self.fs.pipe_file(target, data)
            else:
                self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                staged = f"{target}.{uuid.uuid4().hex}.tmp"
                self.fs.pipe_file(staged, data)
                self.fs.mv(staged, target)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists (``open(..., "xb")``: S3's ``If-None-Match: *``); False when it
        does.  A file system that ignores "xb" overwrites instead: see binary_cache/lease.py's probe."""
        target = self._path(rel)
        try:
            with self._remote(f"create {rel}"):
                if not self.atomic_put:
                    self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
                with self.fs.open(target, "xb") as handle:
                    handle.write(data)
        except FileExistsError:
            return False
        return True

    def list_files(self, rel_dir: str) -> List[StoredFile]:
        top = self._path(rel_dir)
        try:
            with self._remote(f"list {rel_dir}"):
                found = self.fs.find(top, detail=True)
        except FileNotFoundError:
            return []
        prefix = self.root + "/" if self.root else ""
        files: List[StoredFile] = []
        for name, info in found.items():
            if info.get("type") == "directory" or not str(name).startswith(prefix):
                continue
            files.append(StoredFile(str(name)[len(prefix):], int(info.get("size") or 0), _mtime(info)))
        return files

    def remove(self, rel: str) -> None:
        try:
            with self._remote(f"remove {rel}"):
                self.fs.rm_file(self._path(rel))
        except FileNotFoundError:
            pass


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
    """A folder path (or ``file://`` URL) gives a FolderStore; any other URL an FsspecStore."""
    if location.startswith("file://"):
        return FolderStore(location[len("file://"):])
    if "://" in location:
        return FsspecStore(location)
    return FolderStore(location)
