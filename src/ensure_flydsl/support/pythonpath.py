"""PYTHONPATH as the env file leaves it: a caller's entries kept, less the tree's own folders (which the env file
puts first, once).  The env file (``runs/markers.py``), ``activate()`` and the warm call's fingerprint
(``probe/fingerprint.py``) apply the one rule.  Light to import: the warm path uses it."""

from __future__ import annotations

import os
from typing import Optional, Sequence


def without_folders(pythonpath: Optional[str], folders: Sequence[str]) -> str:
    """``pythonpath`` without the entries equal to one of ``folders`` (the env file's own), the rest kept as
    it was, in order: what the env file keeps of a caller's PYTHONPATH after its folders."""
    if not pythonpath:
        return ""
    drop = {f for f in folders if f}
    return os.pathsep.join(entry for entry in pythonpath.split(os.pathsep) if entry not in drop)
