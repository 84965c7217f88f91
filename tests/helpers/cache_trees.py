"""Trees for the binary cache's tests (tests/scenarios/test_cache_*.py): a tree with every kind of member,
its snapshot, an entry published from one, and the check that a fetch was refused and left nothing."""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import Dict, Tuple

import pytest

from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import CacheEntry
from ensure_flydsl.trees.remote import Cache, open_cache
from tests.helpers.cache_entries import FIELDS, KEY


def make_tree(root: str, seed: str = "a", big: int = 0) -> str:
    """Nested files, an executable, a relative symlink, an empty folder, a group-writable file."""
    os.makedirs(os.path.join(root, "flydsl", "_mlir", "lib"))
    os.makedirs(os.path.join(root, "empty"))
    write(os.path.join(root, "flydsl", "__init__.py"), f"__version__ = '0.2.2'  # {seed}\n")
    write(os.path.join(root, "flydsl", "_mlir", "lib", "libFly.so.1"), seed * 1000)
    os.symlink("libFly.so.1", os.path.join(root, "flydsl", "_mlir", "lib", "libFly.so"))
    tool = os.path.join(root, "flydsl", "tool.sh")
    write(tool, "#!/bin/sh\necho hi\n")
    os.chmod(tool, 0o755)
    shared = os.path.join(root, "flydsl", "shared.txt")
    write(shared, "shared")
    os.chmod(shared, 0o666)
    if big:
        with open(os.path.join(root, "big.bin"), "wb") as handle:
            handle.write(hashlib.sha256(seed.encode()).digest() * (big // 32))
    return root


def write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def snapshot(root: str) -> Dict[str, Tuple[str, int, str]]:
    """Every path under root: its type, permission bits, and its content or symlink target."""
    found: Dict[str, Tuple[str, int, str]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if os.path.islink(full):
                found[rel] = ("link", 0, os.readlink(full))
            elif os.path.isdir(full):
                found[rel] = ("dir", st.st_mode & 0o777, "")
            else:
                found[rel] = ("file", st.st_mode & 0o777, hashlib.sha256(open(full, "rb").read()).hexdigest())
    return found


def published(cache_dir: str, tmp_path: "os.PathLike[str]", big: int = 0) -> Tuple[Cache, CacheEntry, str]:
    source = make_tree(os.path.join(str(tmp_path), "src-" + uuid.uuid4().hex[:6]), big=big)
    cache = open_cache(cache_dir)
    return cache, cache.put("tree", KEY, FIELDS, source).entry, source


def assert_rejected(cache: Cache, entry: CacheEntry, work: str, reason: str) -> CacheCorrupt:
    dest = os.path.join(work, "dest")
    with pytest.raises(CacheCorrupt) as caught:
        cache.get(entry, dest)
    assert reason in caught.value.reason, caught.value.reason
    assert "\n" not in caught.value.reason
    assert os.listdir(work) == [], "a rejected fetch left something behind"
    return caught.value
