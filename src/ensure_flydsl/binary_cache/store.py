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

A remote that cannot be reached or is misconfigured (network, credentials, a bucket that does not exist)
raises :class:`CacheUnreachable` and is remembered for the run (``down``): every later operation fails at
once, so an unreachable endpoint costs one timeout per run, not one per step.  S3's reads and connects
have timeouts (``remote_options``): a stalled server holds the run (and the root's lock) for the network
silence limit at most, and a line is said every half of it while an operation waits.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import os
import tempfile
import threading
import time
import uuid
from typing import IO, Any, Dict, Iterator, List, Optional, Union, cast

from ensure_flydsl.binary_cache.folder import FolderStore
from ensure_flydsl.binary_cache.stored import CacheCorrupt, CacheError, CacheUnreachable, StoredFile, bounded
from ensure_flydsl.support.install_route import extra_remedy
from ensure_flydsl.support.processes import heartbeat, network_silence_s, waiting_line
from ensure_flydsl.support.urls import shown_location

READ_BLOCK = 8 << 20  # bytes an fsspec file reads ahead when streaming a blob
# Protocols whose uploads are atomic by themselves (a PUT, or a multipart upload, appears whole or not at all).
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
# Per protocol: timeouts and few retries, so that a silent endpoint ends an operation after the network
# silence limit (60 s; support/processes.py), as every network step of a run does: S3 reads time out after
# half of it, with two attempts and no s3fs retry on top (botocore's defaults: 60 s per read, its own
# retries under s3fs's five: six minutes of silence were seen).
REMOTE_RETRIES = 1


def s3_remedy() -> str:
    return extra_remedy("s3", "point FLYDSL_CACHE at a folder")


def remote_options(protocol: str) -> Dict[str, object]:
    silence = network_silence_s()
    if protocol in ("s3", "s3a"):
        half = max(1.0, silence / 2)
        return {"config_kwargs": {"connect_timeout": min(10.0, half), "read_timeout": half,
                                  "retries": {"mode": "standard", "total_max_attempts": 2}}}
    if protocol in ("ftp", "sftp"):
        return {"timeout": silence}
    return {}


class FsspecStore:
    """A cache behind an fsspec URL.  Any failure of the remote (credentials, network) becomes CacheError."""

    def __init__(self, location: str) -> None:
        self.location = shown_location(location)  # what messages name; the URL itself is only connected to
        try:
            fsspec: Any = importlib.import_module("fsspec")
        except ImportError:
            raise CacheError(f"the cache {self.location} is a URL, which needs fsspec: " + s3_remedy()) from None
        self.read_only = False  # known only by trying: a refused write is reported where it happens
        self.down: Optional[str] = None  # why the remote cannot be used, once it failed in this run
        scheme = location.split("://", 1)[0].lower()
        self.atomic_put = scheme in OBJECT_STORES
        self.fs: Any = None
        self.root = ""
        try:
            # Own instance (fsspec shares one per URL otherwise) and no listing cache: another process or
            # host publishes and prunes under us, and a stale listing would hide or resurrect entries.
            fs, root = fsspec.core.url_to_fs(location, skip_instance_cache=True, use_listings_cache=False,
                                             **remote_options(scheme))
        except ImportError as exc:
            raise CacheError(f"the cache {self.location} needs a package fsspec could not import ({exc}): "
                             + s3_remedy()) from None
        except (ValueError, TypeError) as exc:
            raise CacheError(f"the cache location {self.location} cannot be used: {exc}; use a folder or a URL such "
                             "as s3://bucket/prefix") from None
        except Exception as exc:
            # A file system that connects when it is made (FTP, SFTP) and whose server is down or refuses
            # the login: unreachable, as any remote that fails later, so the run says so once and builds.
            self.down = (f"cannot connect to the cache {self.location}: {type(exc).__name__}: {_one_line(exc)}; "
                         f"{self._advice()}")
            return
        if hasattr(fs, "retries"):
            fs.retries = REMOTE_RETRIES  # s3fs's own attempts (5), each over botocore's two
        self.fs = fs
        self.root = str(root).rstrip("/")
        protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
        self.atomic_put = any(p in OBJECT_STORES for p in protocols)

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    @contextlib.contextmanager
    def _remote(self, what: str, *, writing: bool = False) -> Iterator[None]:
        # botocore and aiohttp raise their own exception types (NoCredentialsError, EndpointConnectionError,
        # ClientError...), not OSError; without this a missing credential would end the run with exit 70.
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
        except FileNotFoundError:
            if not writing:
                raise  # a miss
            # A write's parent is missing: on S3 the bucket itself (NoSuchBucket).
            self._fail(f"cannot {what} in the cache {self.location}: its bucket or folder does not exist; create "
                       "it, or point FLYDSL_CACHE at one that does")
        except (CacheError, FileExistsError):
            raise
        except Exception as exc:
            self._fail(f"cannot {what} in the cache {self.location}: {type(exc).__name__}: {_one_line(exc)}; "
                       f"{self._advice()}")
        finally:
            waiting.cancel()

    def _advice(self) -> str:
        if self.location.split("://", 1)[0].lower() in ("s3", "s3a"):
            return "check the credentials and the endpoint (AWS_ENDPOINT_URL_S3)"
        return "check the URL's host, port and credentials, and that its server answers"

    def _make_parent(self, target: str) -> None:
        """The folder of ``target`` on a file system that has folders (not an object store).  Another host may
        make it at the same moment: fsspec's FTP then fails its MKD ("550 exists") despite exist_ok, which is
        neither "the object exists" nor an unreachable cache; only a folder still missing afterwards is."""
        if self.atomic_put:
            return
        parent = target.rsplit("/", 1)[0]
        # Each failed MKD was another host's folder made a moment before ours; that host may not have made the
        # deeper ones yet (it made `leases`, we failed on it, `leases/r0` is not there yet): go on down, once
        # per level at most, and only a folder still missing after that is a failure.
        tries = parent.count("/") + 2
        for attempt in range(1, tries + 1):
            try:
                self.fs.makedirs(parent, exist_ok=True)
                return
            except Exception:
                if self.fs.isdir(parent):
                    return
                if attempt == tries:
                    raise

    def _fail(self, message: str) -> None:
        self.down = message
        raise CacheUnreachable(message) from None

    def read_bytes(self, rel: str, limit: int) -> Optional[bytes]:
        """The object's bytes, or None when it does not exist; CacheCorrupt past ``limit`` bytes (only that
        much more is read: a store's object is never trusted to be small)."""
        try:
            with self._remote(f"read {rel}"):
                data = bytes(self.fs.cat_file(self._path(rel), start=0, end=limit + 1))
        except FileNotFoundError:
            return None
        return bounded(data, rel, limit)

    @contextlib.contextmanager
    def open_read(self, rel: str) -> Iterator[IO[bytes]]:
        # A bounded read-ahead: a fetch streams the blob, and s3fs would otherwise buffer 50 MiB blocks.
        # Only the store's own calls are judged here: what the caller's body raises (a corrupt tar) is its own.
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
        try:
            with self._remote(f"upload {rel}", writing=True):
                target = self._path(rel)
                if self.atomic_put:
                    self.fs.put_file(tmp, target)
                else:
                    self._make_parent(target)
                    staged = f"{target}.{uuid.uuid4().hex}.tmp"
                    self.fs.put_file(tmp, staged)
                    self.fs.mv(staged, target)
        finally:
            self.discard_upload(tmp)

    def discard_upload(self, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)

    def put_bytes(self, rel: str, data: bytes) -> None:
        with self._remote(f"upload {rel}", writing=True):
            target = self._path(rel)
            if self.atomic_put:
                self.fs.pipe_file(target, data)
            else:
                self._make_parent(target)
                staged = f"{target}.{uuid.uuid4().hex}.tmp"
                self.fs.pipe_file(staged, data)
                self.fs.mv(staged, target)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Create ``rel`` unless it exists (``open(..., "xb")``: S3's ``If-None-Match: *``); False when it
        does.  A file system that ignores "xb" overwrites instead: see binary_cache/lease.py's probe."""
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

    def list_names(self, rel_dir: str) -> List[str]:
        """The names directly in ``rel_dir`` that a create of that name collides with.  On a file system with
        folders (SFTP...), every entry.  On an object store, only objects: a "folder" there is a prefix of
        other objects' keys (``NAME/x``); it stands beside the object ``NAME``, never at it, and a create of
        ``NAME`` succeeds beside it (S3's keys are flat; tested against moto)."""
        top = self._path(rel_dir).rstrip("/")
        try:
            with self._remote(f"list {rel_dir}"):
                found = self.fs.ls(top, detail=True)
        except FileNotFoundError:
            return []
        names = set()
        for info in found:
            name = str(info.get("name") or "").rstrip("/")
            if name == top or not name.startswith(top + "/"):
                continue
            if self.atomic_put and info.get("type") == "directory":
                continue
            names.add(name[len(top) + 1:])
        return sorted(names)

    def remove(self, rel: str) -> None:
        try:
            with self._remote(f"remove {rel}"):
                self.fs.rm_file(self._path(rel))
        except FileNotFoundError:
            pass


class _RemoteReader:
    """A remote file whose reads fail as the store's other calls do (CacheUnreachable, remembered)."""

    def __init__(self, store: FsspecStore, rel: str, handle: Any) -> None:
        self._store, self._rel, self._handle = store, rel, handle

    def read(self, size: int = -1) -> bytes:
        with self._store._remote(f"read {self._rel}"):
            return bytes(self._handle.read(size))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


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
__all__ = ["CacheCorrupt", "CacheError", "CacheUnreachable", "FolderStore", "FsspecStore", "Store", "StoredFile",
           "open_store"]


def open_store(location: str) -> Store:
    """A folder path (or ``file://`` URL) gives a FolderStore; any other URL an FsspecStore."""
    if location.startswith("file://") or "://" not in location:
        return FolderStore(location.removeprefix("file://"))
    return FsspecStore(location)
