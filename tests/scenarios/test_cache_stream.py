"""A cache hit streams: the blob is read once, in place, hashed while it is extracted into a staging folder
that is renamed into place only after the whole blob matched; never copied, never held in memory."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
from typing import Dict, Tuple

import pytest

from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import CacheEntry
from ensure_flydsl.trees.remote import Cache, open_cache
from tests.helpers.cache_entries import FIELDS, KEY, blob_file
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

MIB = 1 << 20


def random_tree(root: str, files: int, size: int) -> str:
    """Incompressible files (the blob is as large as the tree) in two folders."""
    for i in range(files):
        folder = os.path.join(root, "flydsl", "_mlir" if i % 2 else "lib")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"part{i:03d}.bin"), "wb") as handle:
            handle.write(os.urandom(size))
    return root


def published(tmp_path: "os.PathLike[str]", files: int = 4, size: int = MIB) -> Tuple[Cache, CacheEntry, str]:
    cache_dir = os.path.join(str(tmp_path), "cache")
    cache = open_cache(cache_dir)
    entry = cache.put("tree", KEY, FIELDS, random_tree(os.path.join(str(tmp_path), "src"), files, size)).entry
    return cache, entry, cache_dir


def refused(cache: Cache, entry: CacheEntry, tmp_path: "os.PathLike[str]", reason: str) -> None:
    """The fetch fails with ``reason``; its folder holds nothing afterwards: no tree, no staging folder."""
    work = os.path.join(str(tmp_path), "work")
    os.makedirs(work, exist_ok=True)
    with pytest.raises(CacheCorrupt) as caught:
        cache.get(entry, os.path.join(work, "python_packages"))
    assert reason in caught.value.reason, caught.value.reason
    assert os.listdir(work) == [], "a refused fetch left a tree or its staging folder behind"


def flip(path: str, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0x01]))


# -- the blob is checked as a whole, after every member was written into the staging folder -----------------
@pytest.mark.parametrize("where", ["middle", "gzip-trailer"])
def test_a_flipped_byte_in_the_folder_cache_is_refused_and_leaves_nothing(tmp_path: "os.PathLike[str]",
                                                                          where: str) -> None:
    cache, entry, cache_dir = published(tmp_path)
    # The gzip trailer (CRC-32 and length) comes after the last tar block: every member extracts with its
    # right bytes and only the blob's sha256, known at its very end, can refuse the staged tree.
    flip(blob_file(cache_dir, entry), entry.size // 2 if where == "middle" else entry.size - 3)
    refused(cache, entry, tmp_path, f"blob sha256 mismatch: expected {entry.blob[:12]}")


def test_a_truncated_or_longer_blob_is_refused_and_leaves_nothing(tmp_path: "os.PathLike[str]") -> None:
    cache, entry, cache_dir = published(tmp_path)
    path = blob_file(cache_dir, entry)
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(data[: entry.size // 2])
    refused(cache, entry, tmp_path, f"blob size mismatch: expected {entry.size} bytes, got {entry.size // 2} "
                                    "(truncated)")
    with open(path, "wb") as handle:
        handle.write(data[:-8])  # only the gzip trailer missing: every member came
    refused(cache, entry, tmp_path, "(truncated)")
    with open(path, "wb") as handle:
        handle.write(data + b"\0")
    refused(cache, entry, tmp_path, f"blob size mismatch: expected {entry.size} bytes, got more")
    with open(path, "wb") as handle:
        handle.write(data)
    cache.get(entry, os.path.join(str(tmp_path), "work", "python_packages"))  # the intact blob still fetches
    assert sorted(os.listdir(os.path.join(str(tmp_path), "work"))) == ["python_packages"]


# -- the whole tool: a large cache hit, under a file-size limit and with its peak memory measured ------------
RUN_LIMITED = textwrap.dedent("""
    import json, resource, subprocess, sys
    limit = int(sys.argv[1])
    def limited():
        # A file the size of the blob (a copy out of the folder cache) fails with EFBIG; every extracted
        # file is smaller.  Python ignores SIGXFSZ, so the write fails instead of killing the process.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    out = subprocess.run(sys.argv[2:], preexec_fn=limited, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"code": out.returncode, "stdout": out.stdout, "stderr": out.stderr, "peak": peak}))
""")


def host(tmp_path: "os.PathLike[str]", repo: FixtureRepo, name: str, cache: str) -> Workspace:
    ws = Workspace(os.path.join(str(tmp_path), name, "base"), repo)
    ws.env["FLYDSL_CACHE"] = cache
    return ws


def test_a_large_cache_hit_streams_the_blob_without_copying_or_holding_it(tmp_path: "os.PathLike[str]",
                                                                          fixture_repo: FixtureRepo) -> None:
    files, size = 16, 10 * MIB  # 160 MiB of random bytes: the blob is as large, and above the peak allowed
    cache = os.path.join(str(tmp_path), "shared-cache")
    a = host(tmp_path, fixture_repo, "a", cache)
    hook = (f'for i in $(seq 1 {files}); do head -c {size} /dev/urandom > "$PKG/flydsl/_mlir/blob$i.bin"; done')
    built = a.run("--json", timeout=600, FIXTURE_BUILD_HOOK=hook)
    assert built.returncode == 0, built.stderr
    blob = max(glob.glob(os.path.join(cache, "blobs", "*.tar.gz")), key=os.path.getsize)  # the tree's, not MLIR's
    assert os.path.getsize(blob) > files * size
    b = host(tmp_path, fixture_repo, "b", cache)
    limit = 4 * size  # above every file of the tree, far below the blob
    out = subprocess.run([sys.executable, "-c", RUN_LIMITED, str(limit), *b.cmd("--json")], env=b.env,
                         stdout=subprocess.PIPE, text=True, timeout=600, check=True)
    run: Dict[str, object] = json.loads(out.stdout)
    assert run["code"] == 0, run["stderr"]
    result = json.loads(str(run["stdout"]))
    assert result["how"] == "cached", run["stderr"]  # a copy of the blob would have failed: "building instead"
    assert "cache: fetching the tree" in str(run["stderr"]) and b.count("build") == 0
    packages = os.path.join(b.root, "build-fly", "python_packages")
    assert os.path.getsize(os.path.join(packages, "flydsl", "_mlir", "blob1.bin")) == size
    assert glob.glob(os.path.join(b.root, "build-fly", ".*.fetch-*")) == []
    assert_one_tree(b)
    peak = int(str(run["peak"]))
    assert peak < 100 * MIB, f"the fetching process peaked at {peak / MIB:.0f} MiB"


def test_the_file_size_limit_does_catch_a_copy_of_the_blob(tmp_path: "os.PathLike[str]") -> None:
    """The limit the test above runs under fails a process that writes a file as large as the blob."""
    cache, entry, cache_dir = published(tmp_path, files=6)
    copy = os.path.join(str(tmp_path), "copy")
    script = "import shutil, sys; shutil.copyfile(sys.argv[1], sys.argv[2])"
    out = subprocess.run([sys.executable, "-c", RUN_LIMITED, str(2 * MIB), sys.executable, "-c", script,
                          blob_file(cache_dir, entry), copy], stdout=subprocess.PIPE, text=True, check=True)
    run = json.loads(out.stdout)
    assert run["code"] != 0 and "File too large" in run["stderr"], run
    fetched = subprocess.run([sys.executable, "-c", RUN_LIMITED, str(2 * MIB), sys.executable, "-c",
                              "import sys; from ensure_flydsl.trees.remote import open_cache; "
                              "c = open_cache(sys.argv[1]); c.get(c.lookup('tree', sys.argv[2]), sys.argv[3])",
                              cache_dir, KEY, os.path.join(str(tmp_path), "fetched")],
                             stdout=subprocess.PIPE, text=True, check=True)
    assert json.loads(fetched.stdout)["code"] == 0, fetched.stdout
    assert len(os.listdir(os.path.join(str(tmp_path), "fetched", "flydsl", "lib"))) == 3


# -- memory: whatever the blob holds, the fetch holds a few chunks ----------------------------------------
FETCH_PEAK = textwrap.dedent("""
    import sys
    from ensure_flydsl.trees.remote import open_cache
    cache = open_cache(sys.argv[1])
    cache.get(cache.lookup("tree", sys.argv[2]), sys.argv[3])
    # VmHWM, not getrusage: ru_maxrss also keeps the peak of the memory this process had before its exec,
    # a copy of the forking test worker's, which grows over a whole suite.
    with open("/proc/self/status") as status:
        print(next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) * 1024)  # kB
""")


def fetch_peak(location: str, dest: str) -> int:
    """The peak RSS in bytes of a process that fetches the entry KEY from ``location`` into ``dest``."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    out = subprocess.run([sys.executable, "-c", FETCH_PEAK, location, KEY, dest], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_a_highly_compressible_blob_is_not_decompressed_into_memory(tmp_path: "os.PathLike[str]") -> None:
    """256 MiB of zeros gzip to a quarter of a MiB: decompressing a whole read at once would hold them all."""
    source = os.path.join(str(tmp_path), "src", "flydsl")
    os.makedirs(source)
    with open(os.path.join(source, "zeros.bin"), "wb") as handle:
        for _ in range(256):
            handle.write(bytes(MIB))
    cache_dir = os.path.join(str(tmp_path), "cache")
    entry = open_cache(cache_dir).put("tree", KEY, FIELDS, os.path.dirname(source)).entry
    assert entry.size < 2 * MIB
    dest = os.path.join(str(tmp_path), "work", "python_packages")
    peak = fetch_peak(cache_dir, dest)
    assert peak < 100 * MIB, f"the fetch peaked at {peak / MIB:.0f} MiB"
    assert os.path.getsize(os.path.join(dest, "flydsl", "zeros.bin")) == 256 * MIB


def test_fetched_files_keep_their_mtimes_whatever_their_size(tmp_path: "os.PathLike[str]") -> None:
    """A small file's bytes sit in the write buffer until it is closed; setting the mtime before flushing
    them let the close set it to now (a .pyc is valid only for its source's recorded mtime)."""
    source = os.path.join(str(tmp_path), "src", "flydsl")
    os.makedirs(source)
    past = 1000000000  # 2001
    for name, size in (("__init__.py", 27), ("big.bin", 3 * MIB)):
        path = os.path.join(source, name)
        with open(path, "wb") as handle:
            handle.write(b"x" * size)
        os.utime(path, (past, past))
    cache = open_cache(os.path.join(str(tmp_path), "cache"))
    entry = cache.put("tree", KEY, FIELDS, os.path.dirname(source)).entry
    dest = os.path.join(str(tmp_path), "work", "python_packages")
    os.makedirs(os.path.dirname(dest))
    cache.get(entry, dest)
    for name in ("__init__.py", "big.bin"):
        assert os.stat(os.path.join(dest, "flydsl", name)).st_mtime == past, name
