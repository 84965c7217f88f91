"""Whether the root's env file answers a request: the reuse gate, asked of what its JSON twin records.

One answer for every command (``ensure``'s warm path, ``env``, ``verify``, ``status``, ``wait``, and the
runs deciding whether to write a failure marker): the env file answers a request when the tree it names
would pass that request's gate (``probe/gate.py``, the one a fresh probe is judged by).  The gate is
version-only: the twin's tree was probed for the same interpreter, covers every required module from one
tree, and its flydsl passes the request's floor, whatever pin built it.  Under ``--exact-pin`` the tree
must also have been built (or installed) in the root from the request's pin of the request's repository.
And the env file must export what the request asks (the shim folder, ``VLLM_USE_FLYDSL_MOE``).

Pure but for resolving an interpreter's name on ``PATH``; light to import (the warm path uses it), with
``packaging`` imported only when a version has to be compared.
"""

from __future__ import annotations

import os
import shutil
from typing import Dict, Mapping, Optional

from packaging.version import InvalidVersion

from ensure_flydsl import layout
from ensure_flydsl.runs.markers import EnvTwin, read_env_json
from ensure_flydsl.settings import Request, release_at_least, same_repo


def _same_interpreter(twin: EnvTwin, python: str, path_env: Optional[str]) -> bool:
    if twin.request.python == python or twin.python == python:
        return True
    if os.sep in python:
        found: Optional[str] = python
    else:
        found = shutil.which(python, path=path_env)
    return found is not None and os.path.abspath(found) == os.path.abspath(twin.python)


def built_from(twin: EnvTwin) -> str:
    """The pin a twin's tree was built from, in words."""
    if twin.pin:
        return f"pin {twin.pin}" + (f" (commit {twin.commit[:12]})" if twin.commit and twin.commit != twin.pin else "")
    if twin.commit:
        return f"commit {twin.commit[:12]}"
    return "no pin of this tool's (a tree found elsewhere)"


def twin_gap(twin: EnvTwin, request: Request, path_env: Optional[str] = None) -> Optional[str]:
    """None when the env file whose twin is ``twin`` answers ``request`` (as ``Settings.request()`` makes
    it); else why not, as a clause ("it holds flydsl 0.2.2, below ...")."""
    if twin.request == request:
        return None  # written for this very request, which its tree passed
    if twin.FLYDSL_ROOT and twin.FLYDSL_ROOT != request.root:
        return f"it was written for the root {twin.FLYDSL_ROOT}"
    python = request.python
    if not _same_interpreter(twin, python, path_env):
        return f"it was made for the interpreter {twin.python}, not {python}"
    missing = [m for m in request.require if m not in twin.files]
    if missing:
        return f"its tree was not checked for {', '.join(missing)}"
    floor = request.min_version

    try:
        passes = release_at_least(twin.version, floor)
    except InvalidVersion:
        passes = False
    if not passes:
        return f"it holds flydsl {twin.version}, below the floor {floor} (FLYDSL_MIN_VERSION)"
    if request.exact_pin:
        pin, repo = request.pin, request.repo
        same_pin = twin.pin == pin or (bool(twin.commit) and twin.commit == pin.lower())
        if not (same_pin and twin.repo and same_repo(twin.repo, repo)):
            return f"its tree was built from {built_from(twin)}, not from the pin {pin} (FLYDSL_EXACT_PIN)"
    shim = request.shim_dir
    if twin.FLYDSL_SHIM_DIR != shim:
        return f"it exports FLYDSL_SHIM_DIR={twin.FLYDSL_SHIM_DIR!r}, not {shim!r}"
    if (twin.VLLM_USE_FLYDSL_MOE == "1") != request.vllm_moe:
        said = "exports" if twin.VLLM_USE_FLYDSL_MOE == "1" else "does not export"
        return f"it {said} VLLM_USE_FLYDSL_MOE=1 (FLYDSL_VLLM_MOE)"
    return None


def answering_twin(root: str, request: Request, path_env: Optional[str] = None) -> Optional[EnvTwin]:
    """The twin of the root's env file when the env file is there and answers ``request``: then the
    request has succeeded, and no failure marker may name it (a poller would see both)."""

    twin = read_env_json(layout.env_json(root))
    if twin is None or not os.path.isfile(layout.env_file(root)):
        return None
    return twin if twin_gap(twin, request, path_env) is None else None


def installed_twin(root: str) -> Optional[EnvTwin]:
    """The twin of the root's env file, whatever request it answers, when the env file is there."""

    twin = read_env_json(layout.env_json(root))
    return twin if twin is not None and os.path.isfile(layout.env_file(root)) else None


def installed(root: str, request: Request, path_env: Optional[str] = None) -> Optional[Dict[str, object]]:
    """``installed`` of the result objects: what the root's env file holds now, whatever request it was
    written for (a request that failed before its build started leaves the previous install answering),
    and whether it answers ``request``; None when there is no env file."""

    twin = installed_twin(root)
    if twin is None:
        return None
    gap = twin_gap(twin, request, path_env)
    return {"version": twin.version, "how": twin.how, "python": twin.python, "commit": twin.commit,
            "pin": twin.pin, "env_file": layout.env_file(root), "answers": gap is None, "why_not": gap}


def installed_line(found: Mapping[str, object]) -> str:
    """The human line for ``installed``."""
    how = f" ({found['how']})" if found.get("how") else ""
    what = f"flydsl {found['version']}{how} for {found['python']}"
    if found.get("answers"):
        return f"{found['env_file']} answers this request: {what}"
    return (f"the root still holds {what}: {found['env_file']} keeps working for what it was made for, but not "
            f"for this request ({found['why_not']})")
