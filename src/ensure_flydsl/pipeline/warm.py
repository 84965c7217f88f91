"""The warm path: answer from the last success when its fingerprint proves nothing changed.

No subprocess, no lock, no probe: read the JSON twin, check that it answers this request, that the env file
is exactly what this request would write, and that the fingerprint (see fingerprint.py) still matches.
Any doubt means None, and the caller runs the full ensure.
"""

from __future__ import annotations

import os
import time
from typing import List, Mapping, Optional

from ensure_flydsl.layout import stamps_dir
from ensure_flydsl.pipeline.fingerprint import compute, same
from ensure_flydsl.result import Action, How, Result
from ensure_flydsl.runs.markers import env_mapping, render_env_sh, withdraw_failure_marker
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.files import read_json


def tree_stamp_path(root: str) -> str:
    return os.path.join(stamps_dir(root), "tree.json")


def try_warm(settings: Settings, environ: Mapping[str, str]) -> Optional[Result]:
    started = time.monotonic()
    twin = read_json(settings.env_json)
    if twin is None or twin.get("request") != settings.request() or not isinstance(twin.get("fingerprint"), dict):
        return None
    prepend = _strings(twin.get("pythonpath_prepend"))
    watch = _strings(twin.get("watch"))
    site_dirs = _strings(twin.get("site_dirs"))
    if prepend is None or watch is None or site_dirs is None:
        return None
    try:
        with open(settings.env_file) as handle:
            if handle.read() != render_env_sh(settings.root, prepend, settings.shim_dir, settings.vllm_moe):
                return None
    except OSError:
        return None
    now = compute(request=settings.request(), python=settings.python, environ=environ, watch=watch,
                  site_dirs=site_dirs, tree_stamp=tree_stamp_path(settings.root), tree_folders=prepend)
    if not same(twin["fingerprint"], now):
        return None
    # An earlier run's failure never answers for this one (a sibling root's is not ours to take away).
    withdraw_failure_marker(settings.fail_marker, settings.root)
    files = twin.get("files")
    return Result(
        how=How(str(twin.get("how"))), action=Action.WARM, root=settings.root, tree=str(twin.get("tree")),
        version=str(twin.get("version")), python=str(twin.get("python")),
        python_version=str(twin.get("python_version")), abi=str(twin.get("abi")),
        commit=twin.get("commit") if isinstance(twin.get("commit"), str) else None,  # type: ignore[arg-type]
        env=env_mapping(settings.root, prepend, environ.get("PYTHONPATH"), settings.shim_dir, settings.vllm_moe),
        env_file=settings.env_file, prepend=prepend,
        files={str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {},
        durations={"fingerprint": time.monotonic() - started}, run_id=os.urandom(6).hex(),
    )


def _strings(value: object) -> Optional[List[str]]:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None
