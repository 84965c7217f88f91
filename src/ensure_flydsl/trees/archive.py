"""A shared store's artifact: a deterministic gzip'd tar of a folder, and its extraction from a stream, hashed and
bounded as it flows, each tar header held against its manifest member before anything is written."""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import shutil
import tarfile
import zlib
from dataclasses import replace
from typing import IO, List, Sequence, Set, Tuple, cast

from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import CHUNK, Member, walk

TAR_BUFFER = 4 << 20  # what tarfile may hold beyond one request: fewer, larger joins, still a few MiB
TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}


class _Hashing:
    """A stream whose bytes are hashed and counted as they pass, read or written, so none is read twice."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.digest, self.size = stream, hashlib.sha256(), 0

    def _seen(self, data: bytes) -> bytes:
        self.digest.update(data)
        self.size += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        return self._seen(self.stream.read(size))

    def write(self, data: bytes) -> int:
        return self.stream.write(self._seen(data))

    def flush(self) -> None:
        self.stream.flush()


def pack(source: str, out: IO[bytes]) -> Tuple[str, int, List[Member]]:
    """``source`` as a deterministic gzip'd tar into ``out`` (mtimes kept: a .pyc records its source's)."""
    sink = _Hashing(out)
    members: List[Member] = []
    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for member, full in walk(source):
                info = tarfile.TarInfo(member.path)
                info.mode, info.uid, info.gid, info.uname, info.gname = member.mode, 0, 0, "", ""
                info.mtime = int(os.lstat(full).st_mtime)
                info.type, info.linkname = TAR_TYPES[member.type], member.target or ""
                if member.type != "file":
                    tar.addfile(info)
                else:
                    info.size = member.size
                    with open(full, "rb") as handle:
                        reader = _Hashing(handle)
                        tar.addfile(info, cast(IO[bytes], reader))
                    member = replace(member, sha256=reader.digest.hexdigest())
                members.append(member)
    out.flush()
    os.fsync(out.fileno())
    return sink.digest.hexdigest(), sink.size, members


def member_of(info: tarfile.TarInfo) -> Member:
    """The member a tar header declares; CacheCorrupt for any type the store never writes."""
    name = info.name
    if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return Member(name, "file", info.mode, size=info.size)
    if info.type == tarfile.DIRTYPE:
        return Member(name, "dir", info.mode)
    if info.type == tarfile.SYMTYPE:
        return Member(name, "symlink", info.mode, target=info.linkname)
    what = {tarfile.LNKTYPE: f"a hard link (to {info.linkname!r})", tarfile.CHRTYPE: "a device file",
            tarfile.BLKTYPE: "a device file", tarfile.FIFOTYPE: "a fifo"}.get(info.type)
    raise CacheCorrupt(f"member {name!r} is {what}" if what else
                       f"member {name!r} has the unsupported tar type {info.type!r}")


def read_members(tar: tarfile.TarFile, max_members: int, max_bytes: int) -> List[Member]:
    """The members a tar made elsewhere declares (a leading ``./`` dropped, its ``.`` skipped), within bounds;
    for :func:`check_members`, then :func:`extract_checked` of the same (seekable) tar."""
    members: List[Member] = []
    total = 0
    for info in tar:
        info.name = (info.name[2:] if info.name.startswith("./") else info.name).rstrip("/")
        if info.name in ("", "."):
            continue
        members.append(member_of(info))
        total += members[-1].size
        if len(members) > max_members or total > max_bytes:
            raise CacheCorrupt(f"it holds more than {max_members} members or {max_bytes} bytes")
    return members


def extract_checked(tar: tarfile.TarFile, root: str, expected: Sequence[Member]) -> None:
    """The tar stream's members under ``root``, each header held against ``expected`` before it is written."""
    want = {m.path: m for m in expected}
    done: Set[str] = set()
    for info in tar:
        if info.name in ("", "."):
            continue  # a foreign tar's own folder (read_members skipped it too)
        got = member_of(info)
        member = want.get(got.path)
        if member is None:
            raise CacheCorrupt(f"member {got.path!r} is not in the manifest")
        if got.path in done:
            raise CacheCorrupt(f"member {got.path!r} appears twice")
        for name in ("type", "mode", "size", "target"):
            if getattr(got, name) != getattr(member, name):
                raise CacheCorrupt(f"member {got.path!r} differs from the manifest in its {name}: "
                                   f"{getattr(got, name)!r} != {getattr(member, name)!r}")
        parent = posixpath.dirname(got.path)
        if parent and parent not in done:
            raise CacheCorrupt(f"member {got.path!r} comes before its folder {parent!r}")
        path = os.path.join(root, *info.name.split("/"))
        if info.type == tarfile.DIRTYPE:
            os.mkdir(path, 0o700)
        elif info.type == tarfile.SYMTYPE:
            os.symlink(info.linkname, path)
        else:
            _write_file(tar, info, path, member)
        done.add(got.path)
    missing = [path for path in want if path not in done]
    if missing:
        raise CacheCorrupt(f"manifest member {missing[0]!r} is missing from the blob")


def _write_file(tar: tarfile.TarFile, info: tarfile.TarInfo, path: str, want: Member) -> None:
    src = tar.extractfile(info)
    if src is None:
        raise CacheCorrupt(f"member {info.name!r} has no data")
    reader = _Hashing(src)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with src, os.fdopen(os.open(path, flags, 0o600), "wb") as out:
        shutil.copyfileobj(cast(IO[bytes], reader), out, CHUNK)
        # The archive's mtime (a .pyc is valid only for its source's), after a flush: bytes written at close
        # would set it to now.
        out.flush()
        os.utime(out.fileno(), (info.mtime, info.mtime))
    got = reader.digest.hexdigest()
    if want.sha256 is not None and got != want.sha256:
        raise CacheCorrupt(f"extracted file {info.name!r} sha256 mismatch: expected {want.sha256[:12]}.. "
                           f"got {got[:12]}..")


class BlobReader(_Hashing):
    """The blob as tarfile reads it: every byte hashed and counted on its way through, once."""

    def __init__(self, src: IO[bytes], size: int, sha256: str) -> None:
        super().__init__(src)
        self._expected_size, self._expected_sha = size, sha256

    def read(self, size: int = -1) -> bytes:
        chunk = super().read(CHUNK if size is None or size < 0 else size)
        if self.size > self._expected_size:
            raise CacheCorrupt(f"blob size mismatch: expected {self._expected_size} bytes, got more")
        return chunk

    def check_rest(self) -> None:
        """Read what the tar stream left (its end blocks, gzip's trailer); hold the whole against the manifest."""
        while self.read(CHUNK):
            pass
        if self.size != self._expected_size:
            raise CacheCorrupt(f"blob size mismatch: expected {self._expected_size} bytes, got {self.size} "
                               "(truncated)")
        got = self.digest.hexdigest()
        if got != self._expected_sha:
            raise CacheCorrupt(f"blob sha256 mismatch: expected {self._expected_sha[:12]}.. got {got[:12]}..")


def unpack(src: IO[bytes], size: int, sha256: str, members: Sequence[Member], tree: str) -> None:
    """The blob in ``src`` as the new folder ``tree``; a damaged blob is named as such, not by its first symptom."""
    blob = BlobReader(src, size, sha256)
    try:
        # GzipFile gives at most what a read asks for (tarfile's "r|gz" inflates each read whole: a bomb)
        with gzip.GzipFile(fileobj=cast(IO[bytes], blob), mode="rb") as gz, \
                tarfile.open(fileobj=gz, mode="r|", bufsize=TAR_BUFFER) as tar:
            os.mkdir(tree, 0o755)
            extract_checked(tar, tree, members)
    except CacheCorrupt:
        blob.check_rest()
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        blob.check_rest()
        raise CacheCorrupt(f"blob {sha256[:12]} is not a readable gzip'd tar: {exc}") from None
    blob.check_rest()  # each member was held against the manifest as it was written: none is checked again


def set_modes(tree: str, members: Sequence[Member]) -> None:
    """The members' modes (no setuid, nothing others may write), deepest first; folders stay the owner's."""
    for m in sorted(members, key=lambda m: m.path.count("/"), reverse=True):
        full = os.path.join(tree, *m.path.split("/"))
        if m.type == "file":
            os.chmod(full, m.mode & 0o755)
        elif m.type == "dir":
            os.chmod(full, (m.mode & 0o755) | 0o700)
