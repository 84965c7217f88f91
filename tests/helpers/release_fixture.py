"""Fixtures for the release way made from the real flydsl wheel at test time (nothing of it is committed).

The release provider installs a wheel only when its package is byte-identical to the pin's
``python/flydsl``, so a repository whose tag v0.2.2 should take the real 0.2.2 wheel must carry that
wheel's sources: :func:`make_release_repo` extracts them from a downloaded wheel into the fixture's tag.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from typing import Callable, Dict, Optional, Sequence

from tests.helpers.flydsl_fixture import LLVM_HASH_B, FixtureRepo, git, write

VERSION = "0.2.2"
MISSING_MODULE = "fixture_module_no_interpreter_has"


def download_wheelhouse(folder: str) -> str:
    """``folder`` holding flydsl 0.2.2 for the test interpreter, downloaded from the package index."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "--disable-pip-version-check", "-d", folder, f"flydsl=={VERSION}"], check=True)
    wheel_in(folder)
    return folder


def wheel_in(wheelhouse: str) -> str:
    wheels = [n for n in os.listdir(wheelhouse) if n.startswith(f"flydsl-{VERSION}-") and n.endswith(".whl")]
    assert len(wheels) == 1, wheels
    return os.path.join(wheelhouse, wheels[0])


def wheel_sources(wheel: str) -> Dict[str, bytes]:
    """The wheel's ``flydsl/**/*.py`` outside the generated ``_mlir``, by path relative to ``flydsl/``."""
    with zipfile.ZipFile(wheel) as archive:
        return {name[len("flydsl/"):]: archive.read(name) for name in archive.namelist()
                if name.startswith("flydsl/") and name.endswith(".py") and not name.startswith("flydsl/_mlir/")}


def put_sources(repo: str, sources: Dict[str, bytes]) -> None:
    for rel, data in sources.items():
        path = os.path.join(repo, "python", "flydsl", rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)


def make_release_repo(path: str, wheelhouse: str, kernel_extra: str = "") -> FixtureRepo:
    """The plain fixture (v0.2.2, dev, v0.2.3, llvm-b) except that the tag v0.2.2 carries the real 0.2.2
    wheel's sources in python/flydsl beside the fixture's kernels (``kernel_extra`` appended to its kernel);
    the later commits have the fixture's own sources again."""
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    repo = FixtureRepo(path)
    repo.commit("v0.2.2", VERSION)
    put_sources(path, wheel_sources(wheel_in(wheelhouse)))
    if kernel_extra:
        kernel = os.path.join(path, "kernels", "moe_gemm_2stage.py")
        with open(kernel, encoding="utf-8") as handle:
            write(kernel, handle.read() + kernel_extra)
    git(path, "add", "-A")
    git(path, "commit", "-q", "--amend", "-m", "v0.2.2: the real 0.2.2 sources, the fixture's kernels")
    git(path, "tag", "v0.2.2")
    repo.commits["v0.2.2"] = git(path, "rev-parse", "HEAD")
    git(path, "rm", "-r", "-q", "python/flydsl")
    repo.commit("dev", VERSION)
    repo.commit("v0.2.3", "0.2.3", tag="v0.2.3")
    repo.commit("llvm-b", "0.2.3", llvm_hash=LLVM_HASH_B)
    return repo


def rewrite_wheel(source: str, target: str, change: Callable[[str, bytes], bytes], record: bool = True,
                  extra: Optional[Dict[str, bytes]] = None) -> None:
    """A copy of the wheel ``source`` at ``target`` with each file's bytes passed through ``change`` and the
    files ``extra`` added at its end; its RECORD is rewritten to match (as a wheel built that way would carry,
    the added files' lines first) unless ``record`` is False (a wheel damaged after it was built).

    Written in one pass, stored, not compressed: the real wheel's 260 MB library is written in half a second,
    where deflate took 3 s at level 1 and some 20 s at zlib's default level 6, and the tool reads it back in a
    fifth of the time (a test's wheel is read once or twice; its size on disk, 280 MB, does not matter)."""
    added = dict(extra or {})
    with zipfile.ZipFile(source) as old:
        files = {info.filename: change(info.filename, old.read(info)) for info in old.infolist()}
        infos = old.infolist()
    if record:
        name = next(n for n in files if n.endswith(".dist-info/RECORD"))
        lines = [_record_line(path, data) for path, data in reversed(list(added.items()))]
        for path in files:
            if path.endswith("/"):  # a folder entry: RECORD lists files only
                continue
            lines.append(f"{path},," if path == name else _record_line(path, files[path]))
        files[name] = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as new:
        for info in infos:
            new.writestr(info, files[info.filename], compress_type=zipfile.ZIP_STORED)
        for path, data in added.items():
            new.writestr(path, data)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def damaged_wheelhouse(wheelhouse: str, folder: str, record: bool = True) -> str:
    """``folder`` holding a copy of the real wheel whose compiled ``_mlir`` extension is cut short (an
    extension that does not load, as one built for another ABI would), its RECORD matching; with ``record``
    False, RECORD still names the original bytes (a wheel damaged after it was built).  Its Python sources
    are untouched, so it is still built from the v0.2.2 sources."""
    os.makedirs(folder, exist_ok=True)
    source = wheel_in(wheelhouse)

    def cut(name: str, data: bytes) -> bytes:
        if name.startswith("flydsl/_mlir/_mlir_libs/_mlir.") and name.endswith(".so"):
            return b"not an ELF file\n"
        return data

    rewrite_wheel(source, os.path.join(folder, os.path.basename(source)), cut, record)
    return folder


def retagged_wheelhouse(wheelhouse: str, folder: str, cache_tag: str) -> str:
    """``folder`` holding the real wheel relabelled for another CPython (``cpython-310`` -> ``cp310``) with
    its compiled files unchanged: the wheel of another interpreter's ABI forced in, as a mislabelled upload
    on a private index would be."""
    os.makedirs(folder, exist_ok=True)
    source = wheel_in(wheelhouse)
    old_tag = os.path.basename(source).split("-")[2]
    new_tag = "cp" + cache_tag.split("-")[1]
    target = os.path.join(folder, os.path.basename(source).replace(f"-{old_tag}-{old_tag}-", f"-{new_tag}-{new_tag}-"))
    assert target != os.path.join(folder, os.path.basename(source))

    def retag(name: str, data: bytes) -> bytes:
        if name.endswith(".dist-info/WHEEL"):
            return data.replace(f"Tag: {old_tag}-{old_tag}-".encode(), f"Tag: {new_tag}-{new_tag}-".encode())
        return data

    rewrite_wheel(source, target, retag)
    return folder


def extended_wheelhouse(wheelhouse: str, folder: str, extra: Dict[str, bytes]) -> str:
    """``folder`` holding a copy of the real wheel with the files ``extra`` added (by their names in the zip),
    its RECORD naming them with their hashes, as a wheel built that way would carry: it installs, and its
    sources are still byte-identical to the v0.2.2 sources."""
    os.makedirs(folder, exist_ok=True)
    source = wheel_in(wheelhouse)
    rewrite_wheel(source, os.path.join(folder, os.path.basename(source)), lambda name, data: data, extra=extra)
    return folder


def listed_wheelhouse(wheelhouse: str, folder: str, versions: Sequence[str]) -> str:
    """``folder`` holding the real 0.2.2 wheel and, under each of ``versions``' names, a link to it: what
    ``pip index versions`` lists (it reads the names only), for a hint that asks which releases have a wheel
    for this interpreter.  Nothing installs the linked ones."""
    os.makedirs(folder, exist_ok=True)
    source = wheel_in(wheelhouse)
    os.symlink(source, os.path.join(folder, os.path.basename(source)))
    for version in versions:
        name = os.path.basename(source).replace(f"flydsl-{VERSION}-", f"flydsl-{version}-")
        os.symlink(source, os.path.join(folder, name))
    return folder
