"""``ensure-flydsl verify``: the full import probe, as the workflow will run it; exit 0 only for one good tree."""

from __future__ import annotations

import json
from typing import Dict, List

from ensure_flydsl.errors import ExitCode
from ensure_flydsl.layout import tree_folders
from ensure_flydsl.probe.gate import evaluate
from ensure_flydsl.probe.interpreter import probe_modules, run_probe
from ensure_flydsl.runs.markers import read_env_json
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import known


def verify(settings: Settings, environ: Dict[str, str], *, as_json: bool) -> int:
    twin = read_env_json(settings.env_json)
    prepend: List[str] = tree_folders(settings.root)
    if twin is not None:
        prepend = list(twin.pythonpath_prepend)
    probe = run_probe(settings.python, modules=probe_modules(settings.require), prefix=prepend, environ=environ,
                      timeout=settings.probe_timeout, timeout_label=settings.label("probe_timeout"))
    verdict = evaluate(probe, settings.min_version, settings.require)
    if as_json:
        data = probe.to_json()
        data.update({"ok": verdict.reusable, "reason": verdict.reason, "tree": verdict.tree})
        print(json.dumps(data, sort_keys=True))
    else:
        print(f"python:  {probe.interpreter.executable} ({probe.interpreter.version}, {probe.interpreter.abi})")
        print(f"PYTHONPATH: {probe.pythonpath}")
        for module in probe.modules:
            print(f"  {module.name}: {module.file if module.file else 'FAILED: ' + known(module.error)}")
        print(f"version: {probe.version if probe.version is not None else known(probe.version_error)}")
        print(f"tree:    {known(verdict.tree, 'none (the modules do not import from one tree)')}")
        print(("ok: " if verdict.reusable else "not usable: ") + verdict.reason)
    return 0 if verdict.reusable else int(ExitCode.PROBE)
