"""A prebuilt LLVM/MLIR install (FLYDSL_MLIR_URL) instead of the LLVM build, taken only when its content (or, recording
none, its URL) names the pin's LLVM commit; checked as a cache archive is. Anything else is said and LLVM is built."""

from __future__ import annotations

import contextlib
import gzip
import importlib
import os
import platform
import re
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import IO, Any, Callable, Dict, Iterator, Optional, Tuple

from ensure_flydsl.layout import mlir_signers
from ensure_flydsl.support import processes
from ensure_flydsl.support.files import remove_file, remove_tree, rename_into_place
from ensure_flydsl.support.space import size_text
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.trees import archive
from ensure_flydsl.trees.backends import CacheCorrupt, remote_options
from ensure_flydsl.trees.manifest import CHUNK, check_members
from ensure_flydsl.trees.remote import Cache
from ensure_flydsl.ways.cache import provider as cached
from ensure_flydsl.ways.cache.fleet import holding, mlir_turn
from ensure_flydsl.ways.context import Run

OFF, TRITON = "off", "triton"
TRITON_URL = "https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-{llvm8}-{os}-{arch}.tar.gz"
UBUNTU_GLIBC = (2, 35)  # Triton's ubuntu builds are made on Ubuntu 22.04
ALMALINUX_GLIBC = (2, 28)
ARCHES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
CONFIG = "lib/cmake/mlir/MLIRConfig.cmake"
REVISION_FILE = "include/llvm/Support/VCSRevision.h"
MAX_DOWNLOAD = 16 << 30  # bytes of the tar.gz; Triton's are about 1 GiB
MAX_UNPACKED = 64 << 30
MAX_MEMBERS = 500_000
BEAT_S = 20.0
SUGGESTION = ("FLYDSL_MLIR_URL=triton would download Triton's prebuilt LLVM/MLIR for the pin instead (not yet "
              "verified on a ROCm host; the LLVM build stays the fallback)")
_REVISION = re.compile(rb'^#define LLVM_REVISION "([0-9a-fA-F]{40})"', re.MULTILINE)
_FIELD = re.compile(r"\{([^{}]*)\}")


class Unusable(Exception):
    """Why a prebuilt cannot be taken, in one line: the run says it and builds LLVM."""


def triton_url(machine: Optional[str] = None, glibc: Optional[Tuple[int, int]] = None) -> str:
    """Triton's public URL for this host's architecture and C library (``{llvm8}`` left to fill in)."""
    machine = machine if machine is not None else platform.machine()
    arch = ARCHES.get(machine.lower())
    if arch is None:
        raise Unusable(f"Triton publishes no LLVM build for the {machine} architecture (only x64 and arm64)")
    glibc = glibc if glibc is not None else host_glibc()
    if glibc is None or glibc < ALMALINUX_GLIBC:
        found = "no glibc" if glibc is None else f"glibc {glibc[0]}.{glibc[1]}"
        raise Unusable(f"Triton's LLVM builds need glibc 2.28 or newer; this host has {found}")
    system = "ubuntu" if glibc >= UBUNTU_GLIBC else "almalinux"
    return TRITON_URL.replace("{os}", system).replace("{arch}", arch)


def host_glibc() -> Optional[Tuple[int, int]]:
    with contextlib.suppress(ValueError, OSError, AttributeError):
        name, _, version = os.confstr("CS_GNU_LIBC_VERSION").partition(" ")  # type: ignore[union-attr]
        if name == "glibc":
            major, minor = version.split(".")[:2]
            return int(major), int(minor)
    return None


def resolve(setting: str, commit: str) -> str:
    """The URL ``setting`` names for LLVM ``commit`` (``triton`` expanded, ``{llvm}``/``{llvm8}`` filled in)."""
    template = triton_url() if setting == TRITON else setting
    return template.replace("{llvm}", commit).replace("{llvm8}", commit[:8])


def names_commit(setting: str) -> bool:
    """Whether the URL is made from the commit (so a file found there is named for it)."""
    return setting == TRITON or bool({"llvm", "llvm8"} & set(_FIELD.findall(setting)))


@contextlib.contextmanager
def opened(url: str, timeout: float) -> Iterator[Tuple[str, Optional[int], IO[bytes]]]:
    """(resolved URL, announced size, bytes) of an http, https, file or fsspec URL; Unusable when it cannot be read."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    try:
        if scheme in ("http", "https", "file"):
            with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (the schemes are checked)
                length = response.headers.get("Content-Length")
                size = int(length) if length and length.isdigit() else None
                yield response.geturl(), size, response
            return
        fsspec: Any = importlib.import_module("fsspec")  # the fleet cache's extra: any URL the cache supports
        with fsspec.open(url, "rb", **remote_options(scheme)) as handle:
            size = handle.size if isinstance(getattr(handle, "size", None), int) else None
            yield url, size, handle
    except urllib.error.HTTPError as exc:
        raise Unusable(f"{shown_location(url)} answered HTTP {exc.code} ({exc.reason})") from None
    except urllib.error.URLError as exc:
        raise Unusable(f"{shown_location(url)} cannot be reached ({exc.reason})") from None
    except (socket.timeout, TimeoutError):
        raise Unusable(f"nothing received from {shown_location(url)} for {timeout:g} s") from None
    except ImportError:
        raise Unusable(f"{shown_location(url)} needs fsspec, which this Python lacks") from None
    except (OSError, ValueError) as exc:
        raise Unusable(f"{shown_location(url)} cannot be read ({exc})") from None


def download(url: str, dest: str, timeout: float, say: Callable[[str], None]) -> int:
    """The URL's bytes into the file ``dest``, a line at least every BEAT_S; the byte count."""
    got, last = 0, time.monotonic()
    with opened(url, timeout) as (found, size, src):
        if size is not None and size > MAX_DOWNLOAD:
            raise Unusable(f"{shown_location(url)} is {size_text(size)}, more than the {size_text(MAX_DOWNLOAD)} "
                           "an LLVM install may be")
        total = f" of {size_text(size)}" if size is not None else ""
        say(f"prebuilt MLIR: downloading {shown_location(found)}{total}")
        try:
            with open(dest, "wb") as out:
                for chunk in iter(lambda: src.read(CHUNK), b""):
                    out.write(chunk)
                    got += len(chunk)
                    if got > MAX_DOWNLOAD:
                        raise Unusable(f"{shown_location(url)} sent more than {size_text(MAX_DOWNLOAD)}")
                    if time.monotonic() - last >= BEAT_S:  # an agent polls a log that must not fall silent
                        last = time.monotonic()
                        say(f"prebuilt MLIR: {size_text(got)}{total} received")
        except (socket.timeout, TimeoutError):
            raise Unusable(f"the download of {shown_location(url)} stopped: nothing received for {timeout:g} s "
                           f"after {size_text(got)}") from None
        except OSError as exc:
            raise Unusable(f"the download of {shown_location(url)} failed after {size_text(got)} ({exc})") from None
    if size is not None and got != size:
        raise Unusable(f"{shown_location(url)} announced {size_text(size)} and sent {size_text(got)}")
    return got


def unpack(tarball: str, folder: str) -> str:
    """The install in ``tarball`` unpacked under the new ``folder``, checked as a cache entry is; its folder."""
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            members = archive.read_members(tar, MAX_MEMBERS, MAX_UNPACKED)
            check_members(members)
            os.makedirs(folder)
            archive.extract_checked(tar, folder, members)
        archive.set_modes(folder, members)
    except (tarfile.TarError, EOFError, ValueError, zlib.error, gzip.BadGzipFile) as exc:
        raise Unusable(f"it is not a readable tar.gz ({exc})") from None
    except OSError as exc:
        raise Unusable(f"it could not be unpacked into {folder} ({exc})") from None
    except CacheCorrupt as exc:
        raise Unusable(f"it is refused: {exc}") from None
    top = {m.path.split("/")[0] for m in members}
    only = next(iter(top)) if len(top) == 1 else None
    install = os.path.join(folder, only) if only and os.path.isdir(os.path.join(folder, only)) else folder
    if not os.path.isfile(os.path.join(install, *CONFIG.split("/"))):
        raise Unusable(f"it is not an MLIR install: it has no {CONFIG}")
    return install


def accepted(install: str, commit: str, setting: str) -> str:
    """How the install is known to be LLVM ``commit`` (its LLVM_REVISION, else its URL), for the log; else Unusable."""
    revision = None
    with contextlib.suppress(OSError), open(os.path.join(install, *REVISION_FILE.split("/")), "rb") as handle:
        found = _REVISION.search(handle.read(1 << 16))
        revision = found.group(1).decode().lower() if found else None
    if revision == commit:
        return f"its {REVISION_FILE} records LLVM {commit[:12]}"
    if revision is not None:
        raise Unusable(f"it is LLVM {revision[:12]} (its {REVISION_FILE}), not the pin's {commit[:12]}")
    if names_commit(setting):
        return f"LLVM {commit[:12]} named by its URL, not confirmed by content (it records no LLVM_REVISION)"
    raise Unusable(f"it records no LLVM revision ({REVISION_FILE}) and its URL does not name one "
                   "(use {llvm} or {llvm8} in FLYDSL_MLIR_URL)")


def fetch(setting: str, commit: str, dest: str, timeout: float, say: Callable[[str], None]) -> Tuple[int, str]:
    """The prebuilt for ``commit`` installed at the new ``dest`` (renamed into place when whole and accepted):
    (bytes downloaded, how it was accepted).  Unusable, with nothing left behind, when it cannot be taken."""
    url = resolve(setting, commit)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=f".{os.path.basename(dest)}.fetch-", dir=parent)
    try:
        tarball = os.path.join(scratch, "mlir.tar.gz")
        size = download(url, tarball, timeout, say)
        say(f"prebuilt MLIR: unpacking {size_text(size)}")
        install = unpack(tarball, os.path.join(scratch, "install"))
        how = accepted(install, commit, setting)
        rename_into_place(install, dest)
        return size, how
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def take_prebuilt(run: Run, cache: Optional[Cache], commit: str) -> Optional[Tuple[str, Dict[str, object]]]:
    """The prebuilt MLIR for ``commit`` (downloaded before, from the fleet cache, or downloaded now and shared),
    with its identity for the build's stamp; None, said in one line, when there is none to take."""
    setting = run.settings.mlir_url
    if setting == OFF:
        return None
    try:
        url = resolve(setting, commit)
    except Unusable as exc:
        run.say(f"prebuilt MLIR: not used ({exc}); building LLVM/MLIR instead")
        return None
    key: Dict[str, object] = {"llvm_commit": commit, "prebuilt": url}  # never a local build's key
    dest = cached.mlir_place(run, key)[1]
    identity = dict(key)  # the build's stamp: FlyDSL is built again when its MLIR comes from elsewhere
    taken = f"prebuilt {shown_location(url)}"
    if os.path.isfile(os.path.join(dest, *CONFIG.split("/"))) and not os.path.lexists(mlir_signers(dest)):
        run.say(f"prebuilt MLIR for LLVM {commit[:12]} was downloaded before: {dest}")
        run.facts.mlir = taken
        return dest, identity
    # One fetched from the cache is judged there by who signed it, as any MLIR fetched before is.
    turn = mlir_turn(run, cache, key, f"the prebuilt MLIR for LLVM {commit[:12]}")
    if turn.fetched is not None:
        run.facts.mlir = taken
        return turn.fetched, identity
    try:
        with holding(turn.held):  # Unusable is no build failure: the lease is given back for another host to try
            cached.make_room(dest)
            remove_file(mlir_signers(dest))
            run.worked()
            size, how = fetch(setting, commit, dest, processes.network_silence_s(run.environ), run.say)
            run.facts.add_fetched("prebuilt", size)
            run.facts.mlir = taken
            run.say(f"prebuilt MLIR: taken ({how}); the LLVM build is skipped")
            if cache is not None:
                cached.publish_mlir(run, cache, key, dest)
    except Unusable as exc:
        run.say(f"prebuilt MLIR: {shown_location(url)} not used: {exc}; building LLVM/MLIR instead")
        return None
    return dest, identity


def discard(run: Run, install: str, why: str) -> None:
    """A prebuilt that build.sh failed against: said once, removed (it is the tool's own folder)."""
    run.say(f"prebuilt MLIR: the FlyDSL build failed against {install} ({why}); removing it and building "
            "LLVM/MLIR instead")
    remove_tree(install)
    run.facts.mlir = None
