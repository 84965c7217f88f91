"""Keeping the store within bounds: list its trees (size, origin, the roots that use each) and prune the
longest unused ones until it holds at most a size, never a tree a root uses (each root's reference checked
against the root's own record), all under the store's exclusive lock, so no root links a tree while it goes."""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from ensure_flydsl.host_store import refs
from ensure_flydsl.host_store.store import HostStore


class TreeInfo:
    def __init__(self, key: str, size: int, files: int, how: Optional[str], commit: Optional[str],
                 abi: Optional[str], used_by: List[str], last_used: float, problem: str = "") -> None:
        self.key, self.size, self.files, self.how, self.commit, self.abi = key, size, files, how, commit, abi
        self.used_by, self.last_used, self.problem = used_by, last_used, problem

    def to_json(self) -> Dict[str, object]:
        return {"key": self.key, "size": self.size, "files": self.files, "how": self.how, "commit": self.commit,
                "abi": self.abi, "used_by": self.used_by, "last_used": round(self.last_used, 3),
                "problem": self.problem or None}


def list_trees(store: HostStore) -> List[TreeInfo]:
    used = refs.in_use(store.path)
    found = []
    for key in store.keys():
        manifest, why = store.manifest(key)
        try:
            last = os.stat(store.tree_dir(key)).st_mtime
        except OSError:
            continue
        if manifest is None:
            found.append(TreeInfo(key=key,
                                  size=0,
                                  files=0,
                                  how=None,
                                  commit=None,
                                  abi=None,
                                  used_by=used.get(key, []),
                                  last_used=last,
                                  problem=why))
        else:
            found.append(TreeInfo(key=key,
                                  size=manifest.size,
                                  files=len(manifest.files),
                                  how=manifest.how,
                                  commit=manifest.commit,
                                  abi=manifest.abi,
                                  used_by=used.get(key, []),
                                  last_used=last))
    return found


def prune(store: HostStore, max_size: int) -> List[TreeInfo]:
    """Remove unused trees, the longest unused first (an unreadable one before any), until the store's trees hold
    at most ``max_size`` bytes; stale references and killed runs' staging go too.  Return what was removed."""
    removed: List[TreeInfo] = []
    with store.locked(exclusive=True):
        refs.drop_stale(store.path)
        store.clear_staging()
        trees = list_trees(store)
        total = sum(t.size for t in trees)
        for tree in sorted(trees, key=lambda t: (not t.problem, t.last_used)):
            if tree.used_by or (total <= max_size and not tree.problem):
                continue
            store.remove(tree.key)
            total -= tree.size
            removed.append(tree)
    return removed
