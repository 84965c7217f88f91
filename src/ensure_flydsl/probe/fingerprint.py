"""What publish records for the front door's fingerprint (warm.py): the folders it watches, the site folders.
And the interpreter part the host store keeps beside a tree that passed the probe."""

from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional, Sequence

from ensure_flydsl.layout import packages_dir
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.warm import interpreter_identity, python_environment, site_stats


def site_folders(interp: Interpreter) -> List[str]:
    """What ``site`` reads at start-up: the site folders, where the site hooks came from, the standard library."""
    return [d for d in dict.fromkeys([*interp.site_dirs, *interp.hook_dirs, interp.stdlib]) if d]


def interpreter_part(python: str, environ: Mapping[str, str], interp: Interpreter, tree_folders: Sequence[str],
                     modules: Sequence[str]) -> Optional[Dict[str, object]]:
    """The fingerprint's interpreter, less the root's path; None when where the name lands needs a run to tell."""
    identity = interpreter_identity(python, dict(environ), interp.executable)
    if identity is None:
        return None
    return {"interpreter": identity, "abi": interp.abi,
            "environment": python_environment(dict(environ), list(tree_folders)),
            "sites": site_stats(site_folders(interp)), "modules": list(modules)}


def watch_folders(root: str, files: Mapping[str, str], package_folders: Mapping[str, str]) -> List[str]:
    """The folders the answer depends on: each module's top package and its ``.libs``, the root's packages."""
    folders = set()
    for name in files:
        top = os.path.join(package_folders[name], name.split(".")[0])
        folders.add(top)
        if os.path.isdir(top + ".libs"):
            folders.add(top + ".libs")
    packages = packages_dir(root)
    if any(f == packages or f.startswith(packages + os.sep) for f in folders):
        folders.add(packages)
    ordered = sorted(folders)
    return [f for f in ordered if not any(f != g and f.startswith(g + os.sep) for g in ordered)]
