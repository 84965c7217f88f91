"""``ensure-flydsl verify``: the full import probe with the env file's folders first; 0 only for one good tree
that the env file offers for this request (without one, the root's folders are probed, to diagnose)."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

from ensure_flydsl.errors import ExitCode, Stage
from ensure_flydsl.layout import tree_folders
from ensure_flydsl.probe.gate import evaluate
from ensure_flydsl.probe.interpreter import probe_modules, run_probe
from ensure_flydsl.result import result_object
from ensure_flydsl.runs.answer import START_HINT
from ensure_flydsl.runs.markers import installed, installed_twin, twin_gap
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import known

NOT_ANSWERED = 1  # as `env` and `wait`: no env file answers this request


def absent_env_file(env_file: str) -> str:
    """Why no env file answers when there is no twin: none is there, or this user cannot see it."""
    try:
        os.stat(env_file)
    except PermissionError as error:
        return f"the env file {env_file} cannot be read by this user ({error.strerror}); run as its owner"
    except OSError:
        return f"there is no env file at {env_file}"
    return f"the env file {env_file} is not one this tool wrote (its record is missing or unreadable)"


def verify(settings: Settings, environ: Dict[str, str], *, as_json: bool) -> int:
    twin = installed_twin(settings.root)
    prepend: List[str] = tree_folders(settings.root)
    gap: Optional[str] = absent_env_file(settings.env_file)
    if twin is not None:
        prepend = list(twin.pythonpath_prepend)
        gap = twin_gap(twin, settings.request(), environ.get("PATH"))
        if gap is not None:
            gap = f"{settings.env_file} does not answer this request: {gap}"
    probe = run_probe(settings.python, modules=probe_modules(settings.require), prefix=prepend, environ=environ,
                      timeout=settings.probe_timeout, timeout_label=settings.label("probe_timeout"))
    verdict = evaluate(probe, settings.min_version, settings.require)
    if gap is not None:  # nothing installed answers this request: exit 1, as for `env` and `wait`
        probed = f"the tree imports ({verdict.reason})" if verdict.reusable else f"the probe: {verdict.reason}"
        code, ok, reason = NOT_ANSWERED, False, f"{gap}; {probed}"
    elif not verdict.reusable:  # the env file answers this request, but its tree does not import now
        code, ok, reason = int(ExitCode.PROBE), False, verdict.reason
    else:
        code, ok, reason = 0, True, verdict.reason
    if as_json:
        data = probe.to_json()
        data.update(result_object(
            ok=ok, exit_code=code, stage=None if ok else Stage.PROBE, reason=reason, version=probe.version,
            env_file=settings.env_file if ok else None, how=twin.how if ok and twin is not None else None,
            hint=None if ok else (START_HINT if code == NOT_ANSWERED else
                                  "run `ensure-flydsl` to provision a tree that passes, or see `ensure-flydsl doctor`"),
            log=settings.log_file))
        data.update(tree=verdict.tree, installed=installed(settings.root, settings.request(), environ.get("PATH")))
        print(json.dumps(data, sort_keys=True))
    else:
        print(f"python:  {probe.interpreter.executable} ({probe.interpreter.version}, {probe.interpreter.abi})")
        print(f"PYTHONPATH: {probe.pythonpath}")
        for module in probe.modules:
            print(f"  {module.name}: {module.file if module.file else 'FAILED: ' + known(module.error)}")
        print(f"version: {probe.version if probe.version is not None else known(probe.version_error)}")
        print(f"tree:    {known(verdict.tree, 'none (the modules do not import from one tree)')}")
        print(("ok: " if ok else "not usable: ") + reason)
    return code
