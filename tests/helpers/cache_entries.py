"""Cache entries written by hand (damaged, hostile) for the cache's tests."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import time
from typing import Dict, List, Tuple

from ensure_flydsl.trees.manifest import CacheEntry, cache_key
from ensure_flydsl.trees.remote import open_cache

FIELDS: Dict[str, object] = {"repo": "https://github.com/ROCm/FlyDSL.git",
                             "commit": "a35627a2fef0a5a70c63536c4174674223866737",
                             "abi": "cpython-311-x86_64-linux-gnu", "platform": "linux-x86_64",
                             "settings": {"jobs_independent": True, "rocm": "/opt/rocm"}}
KEY = cache_key("tree", FIELDS)


def blob_file(cache_dir: str, entry: CacheEntry) -> str:
    return os.path.join(cache_dir, "blobs", entry.blob + ".tar.gz")


def manifest_file(cache_dir: str, kind: str = "tree", key: str = KEY) -> str:
    return os.path.join(cache_dir, "entries", kind, key + ".json")


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", target: str = "",
            mode: int = 0o644) -> Tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, target
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 3
    return info, data


def publish_raw(cache_dir: str, members: List[Tuple[tarfile.TarInfo, bytes]], key: str = KEY) -> CacheEntry:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    blob = raw.getvalue()
    sha = hashlib.sha256(blob).hexdigest()
    os.makedirs(os.path.join(cache_dir, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(cache_dir, "entries", "tree"), exist_ok=True)
    with open(os.path.join(cache_dir, "blobs", sha + ".tar.gz"), "wb") as handle:
        handle.write(blob)
    records = []
    for info, data in members:
        kind = {tarfile.DIRTYPE: "dir", tarfile.SYMTYPE: "symlink"}.get(info.type, "file")
        record: Dict[str, object] = {"path": info.name, "type": kind, "mode": info.mode, "size": len(data)}
        if kind == "file":
            record["sha256"] = hashlib.sha256(data).hexdigest()
        if kind == "symlink":
            record["target"] = info.linkname
        records.append(record)
    manifest = {"format": 1, "kind": "tree", "key": key, "fields": FIELDS, "blob": sha, "size": len(blob),
                "created": time.time(), "host": "attacker", "tool": "by hand", "members": records}
    with open(os.path.join(cache_dir, "entries", "tree", key + ".json"), "w") as handle:
        json.dump(manifest, handle)
    entry = open_cache(cache_dir).lookup("tree", key)
    assert entry is not None, "the hand-made manifest should parse"
    return entry
