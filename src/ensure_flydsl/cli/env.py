"""``ensure-flydsl env``: the env file, or its JSON twin, when it answers this request (markers.twin_gap)."""

from __future__ import annotations

import json
import sys
from typing import Mapping, Optional

from ensure_flydsl.result import result_object
from ensure_flydsl.runs.answer import START_HINT
from ensure_flydsl.runs.markers import EnvFile, installed, installed_twin, twin_gap
from ensure_flydsl.settings import Settings

NO_ENV_FILE = 1


def show_env(settings: Settings, fmt: str, environ: Mapping[str, str], *, as_json: bool = False) -> int:
    twin = installed_twin(settings.root)
    if twin is None:
        _open_or_absent(settings.env_json)
    request = settings.request()
    gap: Optional[str] = f"there is no env file at {settings.env_file}" if twin is None else \
        twin_gap(twin, request, environ.get("PATH"))
    if gap is not None and twin is not None:
        gap = f"{settings.env_file} does not answer this request: {gap}"
    code = NO_ENV_FILE if gap is not None else 0
    if as_json:
        data = result_object(ok=gap is None, exit_code=code, reason=gap, hint=START_HINT if gap else None,
                             log=settings.log_file)
        if twin is not None and gap is None:
            data.update(how=twin.how, env_file=settings.env_file, version=twin.version, built=twin.built,
                        run_id=twin.run_id or None, elapsed_s=twin.elapsed_s,
                        reason=f"{settings.env_file} answers this request: flydsl {twin.version} ({twin.how}) "
                               f"for {twin.python}")
        data.update(root=settings.root, installed=installed(settings.root, request, environ.get("PATH")),
                    env=None if twin is None or gap is not None else EnvFile(
                        settings.root, tuple(twin.pythonpath_prepend), twin.FLYDSL_SHIM_DIR,
                        twin.VLLM_USE_FLYDSL_MOE == "1").mapping(environ.get("PYTHONPATH")))
        print(json.dumps(data, sort_keys=True))
        return code
    if gap is not None:
        print(f"ensure-flydsl: {gap}; run `ensure-flydsl` (or `ensure-flydsl start`) first", file=sys.stderr)
        return NO_ENV_FILE
    path = settings.env_json if fmt == "json" else settings.env_file
    try:
        with open(path) as handle:
            sys.stdout.write(handle.read())
    except FileNotFoundError:
        print(f"ensure-flydsl: no env file at {path}; run `ensure-flydsl` (or `ensure-flydsl start`) first",
              file=sys.stderr)
        return NO_ENV_FILE
    return 0


def _open_or_absent(path: str) -> None:
    """A twin another user's umask keeps from us is not "no env file": the refusal names the folder (access.py)."""
    try:
        with open(path, "rb"):
            pass
    except FileNotFoundError:
        pass
