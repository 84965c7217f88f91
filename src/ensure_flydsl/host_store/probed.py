"""The probes a stored tree passed: per interpreter fingerprint (what the warm path's fingerprint holds, less
the root's own path), flydsl's version and the file of each probed module relative to the root.  A root that
links the tree for an interpreter with the same fingerprint takes that answer instead of probing again
(``--verify`` always probes).  Read back field by field: a record that means anything else is no answer."""

from __future__ import annotations

import json
from typing import Dict, List, Optional

from ensure_flydsl import layout
from ensure_flydsl.host_store.manifest import safe_relative
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write_json, read_json

KEEP = 16  # interpreters remembered per tree (the newest)


class Passed:
    def __init__(self, version: str, files: Dict[str, str]) -> None:
        self.version, self.files = version, files  # module -> file relative to the root


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _records(tree: str) -> List[Dict[str, object]]:
    data = read_json(layout.store_probed(tree))
    raw = data.get("passed") if data is not None else None
    return [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []


def passed(tree: str, fingerprint: Dict[str, object], modules: List[str]) -> Optional[Passed]:
    """The probe this tree passed with an interpreter of ``fingerprint`` importing ``modules``, if any."""
    for record in _records(tree):
        if not _same(record.get("fingerprint"), fingerprint):
            continue
        version, files = fields.short_text(record.get("version")), fields.text_map(record.get("files"))
        if version is None or files is None or sorted(files) != sorted(modules):
            return None
        if not all(safe_relative(f) for f in files.values()):
            return None
        return Passed(version, files)
    return None


def remember(tree: str, fingerprint: Dict[str, object], version: str, files: Dict[str, str]) -> None:
    """Record a pass (the caller holds the store's exclusive lock)."""
    kept = [r for r in _records(tree) if not _same(r.get("fingerprint"), fingerprint)][-(KEEP - 1):]
    kept.append({"fingerprint": fingerprint, "version": version, "files": files})
    atomic_write_json(layout.store_probed(tree), {"passed": kept})
