"""``ensure-flydsl env`` and ``verify``: the env file when it answers this request (markers.twin_gap), and the
full import probe of its tree: 0 only for one good tree (without an env file the root's folders are probed)."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Mapping, Optional

from ensure_flydsl.cli.status import ABSENT_EXIT
from ensure_flydsl.errors import ExitCode, Stage
from ensure_flydsl.layout import tree_folders
from ensure_flydsl.probe.gate import evaluate
from ensure_flydsl.probe.interpreter import probe_modules, run_probe
from ensure_flydsl.result import result_object
from ensure_flydsl.runs.answer import START_HINT
from ensure_flydsl.runs.markers import EnvFile, EnvTwin, installed, installed_twin, twin_gap
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import known


def _gap(settings: Settings, twin: Optional[EnvTwin], environ: Mapping[str, str], absent: str) -> Optional[str]:
    """Why the env file does not answer this request (``absent`` without one), or None when it does."""
    if twin is None:
        return absent
    gap = twin_gap(twin, settings.request(), environ.get("PATH"))
    return None if gap is None else f"{settings.env_file} does not answer this request: {gap}"


def show_env(settings: Settings, fmt: str, environ: Mapping[str, str], *, as_json: bool = False) -> int:
    twin = installed_twin(settings.root)
    if twin is None:
        try:  # a twin another user's umask keeps from us is not "no env file": the refusal names the folder
            with open(settings.env_json, "rb"):
                pass
        except FileNotFoundError:
            pass
    gap = _gap(settings, twin, environ, f"there is no env file at {settings.env_file}")
    code = ABSENT_EXIT if gap is not None else 0
    if as_json:
        data = result_object(ok=gap is None, exit_code=code, reason=gap, hint=START_HINT if gap else None,
                             log=settings.log_file)
        if twin is not None and gap is None:
            data.update(how=twin.how, env_file=settings.env_file, version=twin.version, built=twin.built,
                        run_id=twin.run_id or None, elapsed_s=twin.elapsed_s,
                        reason=f"{settings.env_file} answers this request: flydsl {twin.version} ({twin.how}) "
                               f"for {twin.python}")
        data.update(root=settings.root, installed=installed(settings.root, settings.request(), environ.get("PATH")),
                    env=None if twin is None or gap is not None else EnvFile(
                        settings.root, tuple(twin.pythonpath_prepend), twin.FLYDSL_SHIM_DIR,
                        twin.VLLM_USE_FLYDSL_MOE == "1").mapping(environ.get("PYTHONPATH")))
        print(json.dumps(data, sort_keys=True))
        return code
    if gap is not None:
        print(f"ensure-flydsl: {gap}; run `ensure-flydsl` (or `ensure-flydsl start`) first", file=sys.stderr)
        return ABSENT_EXIT
    path = settings.env_json if fmt == "json" else settings.env_file
    try:
        with open(path) as handle:
            sys.stdout.write(handle.read())
    except FileNotFoundError:
        print(f"ensure-flydsl: no env file at {path}; run `ensure-flydsl` (or `ensure-flydsl start`) first",
              file=sys.stderr)
        return ABSENT_EXIT
    return 0


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
    prepend: List[str] = list(twin.pythonpath_prepend) if twin is not None else tree_folders(settings.root)
    gap = _gap(settings, twin, environ, absent_env_file(settings.env_file))
    probe = run_probe(settings.python, modules=probe_modules(settings.require), prefix=prepend, environ=environ,
                      timeout=settings.probe_timeout, timeout_label=settings.label("probe_timeout"))
    verdict = evaluate(probe, settings.min_version, settings.require)
    if gap is not None:  # nothing installed answers this request: exit 1, as for `env` and `wait`
        probed = f"the tree imports ({verdict.reason})" if verdict.reusable else f"the probe: {verdict.reason}"
        code, ok, reason = ABSENT_EXIT, False, f"{gap}; {probed}"
    elif not verdict.reusable:  # the env file answers this request, but its tree does not import now
        code, ok, reason = int(ExitCode.PROBE), False, verdict.reason
    else:
        code, ok, reason = 0, True, verdict.reason
    if as_json:
        data = probe.to_json()
        data.update(result_object(
            ok=ok, exit_code=code, stage=None if ok else Stage.PROBE, reason=reason, version=probe.version,
            env_file=settings.env_file if ok else None, how=twin.how if ok and twin is not None else None,
            hint=None if ok else (START_HINT if code == ABSENT_EXIT else
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
