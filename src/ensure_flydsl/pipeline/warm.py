"""The warm path: answer from the last success when its fingerprint proves nothing changed.

No subprocess, no lock, no probe: read the JSON twin, check that it answers this request (written for it, or
its tree passes this request's gate: runs/twin_gate.py), that the env file
is exactly what this request would write, and that the fingerprint (see probe/fingerprint.py) still matches.
Any doubt means None, and the caller runs the full ensure.
"""

from __future__ import annotations

import os
import time

from ensure_flydsl.layout import stamp_file
from ensure_flydsl.probe.fingerprint import compute, same
from ensure_flydsl.result import Action, How, Result
from ensure_flydsl.runs.markers import env_mapping, read_env_json, render_env_sh, withdraw_failure_marker
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.files import read_regular

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Mapping, Optional


def tree_stamp_path(root: str) -> str:
    return stamp_file(root, "tree")


def try_warm(settings: Settings, environ: Mapping[str, str]) -> Optional[Result]:
    started = time.monotonic()
    twin = read_env_json(settings.env_json)
    if twin is None:
        return None
    if twin.request != settings.request():
        # Written for another request: it answers this one too when its tree passes this request's gate.
        from ensure_flydsl.runs.twin_gate import twin_gap

        if twin_gap(twin, settings.request(), environ.get("PATH")) is not None:
            return None
    prepend = twin.pythonpath_prepend
    written = read_regular(settings.env_file)
    if written is None or written.decode(errors="replace") != render_env_sh(settings.root, prepend, settings.shim_dir,
                                                                             settings.vllm_moe):
        return None
    now = compute(request=twin.request, python=settings.python, executable=twin.python, environ=environ,
                  watch=twin.watch, site_dirs=twin.site_dirs, tree_stamp=tree_stamp_path(settings.root),
                  tree_folders=prepend)
    if now["interpreter"] is None or not same(twin.fingerprint, now):
        return None
    # An earlier run's failure never answers for this one (a sibling root's is not ours to take away).
    withdraw_failure_marker(settings.fail_marker, settings.root)
    return Result(
        how=How(twin.how), action=Action.WARM, root=settings.root, tree=twin.tree, version=twin.version,
        python=twin.python, python_version=twin.python_version, abi=twin.abi, commit=twin.commit,
        env=env_mapping(settings.root, prepend, environ.get("PYTHONPATH"), settings.shim_dir, settings.vllm_moe),
        env_file=settings.env_file, prepend=list(prepend), files={str(k): str(v) for k, v in twin.files.items()},
        durations={"fingerprint": time.monotonic() - started}, run_id=os.urandom(6).hex(),
        reason=f"nothing changed since run {twin.run_id or 'of an earlier version'} wrote {settings.env_file}",
        elapsed_s=time.monotonic() - started, link_mode=twin.link_mode,
    )

