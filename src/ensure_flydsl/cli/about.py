"""``ensure-flydsl -V``: the version, and the commit when the code is known to be that commit's."""

from __future__ import annotations

import hashlib
import os
import re
from typing import Optional

from ensure_flydsl.geak.folder import MADE_BY, MANIFEST
from ensure_flydsl.geak.provenance import PACKAGE_DIR, tool_commit
from ensure_flydsl.support.files import read_json
from ensure_flydsl.version import __version__

# What geak/provenance.py says of code that is a commit's: its hash, marked when the files differ from it.
COMMIT = r"^[0-9a-f]{40}( with local changes)?$"


def version_line() -> str:
    """``ensure-flydsl VERSION``, with the commit when the code is known to be a commit's."""
    commit = _skill_folder_commit(PACKAGE_DIR)
    if commit is None:
        commit = tool_commit()
        commit = commit if re.match(COMMIT, commit) else ""
    return f"ensure-flydsl {__version__}" + (f" (commit {commit})" if commit else "")


def _skill_folder_commit(package_dir: str) -> Optional[str]:
    """In a GEAK folder (``skill DIR``: DIR/tool/ensure_flydsl): the commit its manifest names when the
    package's files are still the ones it lists ("" when they are not: no commit is claimed for them);
    None outside such a folder.  The folder may sit in a checkout of GEAK, whose commit is not the tool's."""

    folder = os.path.dirname(os.path.dirname(package_dir))
    if os.path.basename(os.path.dirname(package_dir)) != "tool":
        return None
    manifest = read_json(os.path.join(folder, MANIFEST))
    if manifest is None or manifest.get("made_by") != MADE_BY:
        return None
    files, commit = manifest.get("files"), manifest.get("commit")
    if not isinstance(files, dict) or not isinstance(commit, str) or not re.match(COMMIT, commit):
        return ""
    prefix = os.path.relpath(package_dir, folder) + os.sep
    listed = {path: sha for path, sha in files.items() if isinstance(path, str) and path.startswith(prefix)}
    found = {}
    for current, dirs, names in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = os.path.join(current, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return commit if found == listed else ""
