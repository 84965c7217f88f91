"""Which roots use which stored tree.  Each root that links a tree holds two records: the store's reference
(``refs/<hash of the root>.json``: the root and the tree) and the root's own (``ROOT/.ensure_flydsl/store.json``:
the store and the tree).  A tree is in use while some reference names it and that root's own record still
names this store and this tree; a reference whose root is gone, or moved to another tree, holds nothing."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional, Tuple

from ensure_flydsl import layout
from ensure_flydsl.host_store.link import MODES
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write_json, read_json, remove_file


def ref_file(store: str, root: str) -> str:
    name = hashlib.sha256(os.fsencode(root)).hexdigest()[:32]
    return os.path.join(layout.store_refs_dir(store), name + ".json")


def hold(store: str, root: str, key: str, link_mode: str) -> None:
    """``root`` uses the tree ``key`` of ``store`` (its own record first: a reference alone holds nothing)."""
    atomic_write_json(layout.root_store_record(root), {"store": store, "tree": key, "link_mode": link_mode})
    atomic_write_json(ref_file(store, root), {"root": root, "tree": key})


def release(root: str) -> None:
    """The root's tree changes: its own record goes (its reference then holds nothing)."""
    remove_file(layout.root_store_record(root))


def root_record(root: str) -> Optional[Tuple[str, str, str]]:
    """(store, tree key, link mode) the root says its tree is linked from, when the record means that."""
    data = read_json(layout.root_store_record(root))
    if data is None:
        return None
    store, key, mode = fields.absolute_path(data.get("store")), fields.text(data.get("tree")), \
        fields.one_of(data.get("link_mode"), MODES)
    if store is None or key is None or mode is None:
        return None
    return store, key, mode


def references(store: str) -> List[Tuple[str, Optional[str], Optional[str]]]:
    """(reference file, root, tree) of every reference in the store (root and tree None when unreadable)."""
    folder = layout.store_refs_dir(store)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(folder, name)
        data = read_json(path) if name.endswith(".json") else None
        root = fields.absolute_path(data.get("root")) if data else None
        tree = fields.text(data.get("tree")) if data else None
        found.append((path, root, tree))
    return found


def in_use(store: str) -> Dict[str, List[str]]:
    """Tree key -> the roots that use it now (each checked against the root's own record)."""
    used: Dict[str, List[str]] = {}
    real = os.path.realpath(store)
    for _, root, tree in references(store):
        if root is None or tree is None:
            continue
        record = root_record(root)
        if record is not None and os.path.realpath(record[0]) == real and record[1] == tree:
            used.setdefault(tree, []).append(root)
    return used


def drop_stale(store: str) -> List[str]:
    """Remove the references that hold nothing (unreadable, root gone or moved on); the roots they named."""
    used = in_use(store)
    dropped = []
    for path, root, tree in references(store):
        if root is None or tree is None or root not in used.get(tree, []):
            remove_file(path)
            dropped.append(root or os.path.basename(path))
    return dropped
