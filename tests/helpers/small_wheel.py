"""Small wheels made in a test (a zip of a few named files) and the checkout's ``python/flydsl`` beside them:
for the pure rules of the release way (provenance, the wheel's shape), which need no real 75 MB wheel."""

from __future__ import annotations

import os
import zipfile
from typing import Dict


def make_wheel(path: str, files: Dict[str, bytes]) -> str:
    """A zip at ``path`` holding ``files`` (by their names in the zip), in the order given."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def make_sources(folder: str, files: Dict[str, bytes]) -> str:
    """``folder`` holding ``files`` (by their paths relative to it)."""
    for rel, data in files.items():
        os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
        with open(os.path.join(folder, rel), "wb") as handle:
            handle.write(data)
    return folder
