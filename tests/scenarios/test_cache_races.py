"""The binary cache under concurrent publishers and a reader, and when the disk fills during a fetch."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest

from ensure_flydsl.trees.backends import CacheCorrupt, CacheError
from ensure_flydsl.trees.manifest import cache_key
from ensure_flydsl.trees.remote import open_cache
from tests.helpers.cache_entries import FIELDS, KEY
from tests.helpers.cache_trees import write

# -- races, pruning, full disks ------------------------------------------------------------------------
RACE_SCRIPT = textwrap.dedent("""
    import os, shutil, sys, time
    from ensure_flydsl.trees.manifest import cache_key
    from ensure_flydsl.trees.remote import open_cache
    role, cache_dir, go, stop = sys.argv[1:5]
    fields = {"commit": "c" * 40, "abi": "race"}
    key = cache_key("tree", fields)
    while not os.path.exists(go):
        time.sleep(0.001)
    cache = open_cache(cache_dir)
    if role == "reader":
        fetched = misses = 0
        while not os.path.exists(stop) or fetched == 0:
            entry = cache.lookup("tree", key)
            if entry is None:
                misses += 1
                continue
            dest = os.path.join(sys.argv[5], "d%d" % fetched)
            cache.get(entry, dest)  # must never fail for an entry whose manifest was seen
            who = open(os.path.join(dest, "who")).read()
            assert open(os.path.join(dest, "data.bin"), "rb").read() == who.encode() * (1 << 20), who
            shutil.rmtree(dest)
            fetched += 1
        print(fetched, misses)
    else:
        for i in range(6):
            cache.put("tree", key, fields, sys.argv[5 + (i % 2)])
""")


def test_concurrent_publishers_of_one_key_and_a_reader(cache_dir: str, tmp_path: "os.PathLike[str]") -> None:
    base = str(tmp_path)
    sources = []
    for who in "AB":
        src = os.path.join(base, "src" + who)
        os.makedirs(src)
        write(os.path.join(src, "who"), who)
        with open(os.path.join(src, "data.bin"), "wb") as handle:
            handle.write(who.encode() * (1 << 20))
        sources.append(src)
    go, stop, fetched = (os.path.join(base, n) for n in ("go", "stop", "fetched"))
    os.makedirs(fetched)
    script = os.path.join(base, "race.py")
    write(script, RACE_SCRIPT)
    run = [sys.executable, script]
    procs = [subprocess.Popen(run + ["publisher", cache_dir, go, stop, sources[0], sources[1]]),
             subprocess.Popen(run + ["publisher", cache_dir, go, stop, sources[1], sources[0]])]
    reader = subprocess.Popen(run + ["reader", cache_dir, go, stop, fetched], stdout=subprocess.PIPE, text=True)
    write(go, "")
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    write(stop, "")
    out, _ = reader.communicate(timeout=120)
    assert reader.returncode == 0, out
    assert int(out.split()[0]) >= 1
    cache = open_cache(cache_dir)
    entry = cache.lookup("tree", cache_key("tree", {"commit": "c" * 40, "abi": "race"}))
    assert entry is not None
    cache.get(entry, os.path.join(base, "final"))
    names = os.listdir(os.path.join(cache_dir, "blobs"))
    assert len(names) == 2  # one blob per content, no stray upload, each named by its bytes
    for name in names:
        assert name == hashlib.sha256(open(os.path.join(cache_dir, "blobs", name), "rb").read()).hexdigest() + \
            ".tar.gz"


FULL_DISK_SCRIPT = textwrap.dedent("""
    import os, resource, signal, sys
    from ensure_flydsl.trees.backends import CacheCorrupt, CacheError
    from ensure_flydsl.trees.remote import open_cache
    cache_dir, key, dest, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    cache = open_cache(cache_dir)
    entry = cache.lookup("tree", key)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then writes past the limit fail with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        cache.get(entry, dest)
    except CacheCorrupt as exc:
        print("corrupt:", exc)
    except CacheError as exc:
        print("error:", exc)
    else:
        print("fetched")
""")


@pytest.mark.parametrize("content", ["incompressible", "compressible"])
def test_a_full_disk_during_fetch_leaves_nothing_behind(content: str, cache_dir: str, work: str,
                                                        tmp_path: "os.PathLike[str]") -> None:
    """Incompressible: the blob copy hits the limit; compressible: a small blob, the extracted file hits it."""
    source = os.path.join(str(tmp_path), "src")
    os.makedirs(source)
    with open(os.path.join(source, "big.bin"), "wb") as handle:
        handle.write(os.urandom(2 << 20) if content == "incompressible" else bytes(2 << 20))
    entry = open_cache(cache_dir).put("tree", KEY, FIELDS, source).entry
    assert (entry.size > 1 << 20) == (content == "incompressible")
    script = os.path.join(str(tmp_path), "full.py")
    write(script, FULL_DISK_SCRIPT)
    out = subprocess.run([sys.executable, script, cache_dir, KEY, os.path.join(work, "dest"), str(1 << 20)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert out.stdout.startswith("error: fetching tree entry"), out.stdout
    assert "File too large" in out.stdout and "nothing was left behind" in out.stdout
    assert os.listdir(work) == []


@pytest.fixture
def small_tmpfs(tmp_path: "os.PathLike[str]") -> Iterator[str]:
    path = os.path.join(str(tmp_path), "small")
    os.makedirs(path)
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path],
                                                   stderr=subprocess.DEVNULL, check=False).returncode == 0
    if not mounted:
        pytest.skip("cannot mount a tmpfs here (needs root); the RLIMIT_FSIZE test covers a full disk")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=True)


def test_a_full_tmpfs_during_fetch_leaves_nothing_behind(small_tmpfs: str, cache_dir: str,
                                                         tmp_path: "os.PathLike[str]") -> None:
    source = os.path.join(str(tmp_path), "src")
    os.makedirs(source)
    for n in range(3):
        with open(os.path.join(source, f"part{n}.bin"), "wb") as handle:
            handle.write(bytes(600 << 10))  # compresses to almost nothing; 1.8 MiB does not fit in 1 MiB
    cache = open_cache(cache_dir)
    entry = cache.put("tree", KEY, FIELDS, source).entry
    with pytest.raises(CacheError) as caught:
        cache.get(entry, os.path.join(small_tmpfs, "dest"))
    assert not isinstance(caught.value, CacheCorrupt)
    assert "no space left on the file system holding" in str(caught.value)  # support/space.py's one line
    assert f"mounted at {small_tmpfs})" in str(caught.value) and "nothing was left behind" in str(caught.value)
    assert os.listdir(small_tmpfs) == []
