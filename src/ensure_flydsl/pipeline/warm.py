"""The warm path behind the front door: answer from the env file's twin while its fingerprint holds
(``try_warm``), and keep the front door's stamp (``keep_warm``) for calls with the same raw inputs."""

from __future__ import annotations

import json
import marshal
import os
import re
import time
from dataclasses import fields
from typing import Dict, List, Mapping, Optional, Sequence

from ensure_flydsl import warm
from ensure_flydsl.layout import HOST_VARIABLES, stamp_file, warm_stamp
from ensure_flydsl.probe.gate import shadow_candidates, shadowing
from ensure_flydsl.probe.interpreter import broken_user_line
from ensure_flydsl.result import Action, Result, TreeIdentity
from ensure_flydsl.runs.markers import EnvFile, EnvTwin, read_env_json, twin_gap, withdraw_failure_marker
from ensure_flydsl.settings import HOST_ID, SETTINGS, Settings
from ensure_flydsl.support.files import atomic_write
from ensure_flydsl.support.report import known

# The settings' variables and those their checks read: their values key a stamp's entry.
VARIABLES = (*(setting.env for setting in SETTINGS), *HOST_VARIABLES, HOST_ID, "GIT_CONFIG_COUNT")
MAX_ENTRIES = 16  # raw inputs remembered per root (callers in other folders, with other variables)
CALLER_KEYS = ("version", "interpreter", "environment")  # warm.caller_part's; the rest is warm.tree_part's


def try_warm(settings: Settings, environ: Mapping[str, str], warm_key: Optional[Sequence[str]] = None
             ) -> Optional[Result]:
    """The last success's answer when its twin answers this request and its fingerprint still holds; the front
    door answers the next call with the raw inputs ``warm_key`` the same (``keep_warm``)."""
    started = time.monotonic()
    twin = read_env_json(settings.env_json)
    if twin is None:
        return None
    # Written for another request, it answers this one too when its tree passes this request's gate.
    if twin_gap(twin, settings.request(), environ.get("PATH")) is not None:
        return None
    if warm.regular_text(settings.env_file) != exports(settings, twin).text():
        return None
    now = fingerprint(settings, environ, twin)
    if now["interpreter"] is None or not same(twin.fingerprint, now):
        return None
    # An earlier run's failure never answers for this one (a sibling root's is not ours to take away).
    withdraw_failure_marker(settings.fail_marker, settings.root)
    result = warm_result(settings, environ, twin, time.monotonic() - started)
    keep_warm(settings, environ, warm_key, twin, now)
    return result


def exports(settings: Settings, twin: EnvTwin) -> EnvFile:
    """What the env file exports for ``settings`` with the twin's tree (its request may be another one)."""
    return EnvFile(settings.root, tuple(twin.pythonpath_prepend), settings.shim_dir, settings.vllm_moe)


def fingerprint(settings: Settings, environ: Mapping[str, str], twin: EnvTwin) -> Dict[str, object]:
    """Everything a warm answer with ``twin``'s tree depends on, as plain data compared for equality (the twin keeps
    it as JSON)."""
    return {**warm.caller_part(settings.python, twin.python, dict(environ), list(twin.pythonpath_prepend)),
            **warm.tree_part(list(twin.watch), list(twin.site_dirs), stamp_file(settings.root, "tree"))}


def same(recorded: object, current: Mapping[str, object]) -> bool:
    """Whether a fingerprint read back from JSON equals one computed now, as JSON reads it back."""
    return bool(recorded == json.loads(json.dumps(current)))


def result_of(settings: Settings, environ: Mapping[str, str], twin: EnvTwin, action: Action, *,
              durations: Dict[str, float], run_id: str, reason: str, elapsed_s: float,
              log: Optional[str] = None) -> Result:
    """The Result of a call that answers with ``twin``'s tree (the one publish wrote, or a warm call read)."""
    return Result(
        **{f.name: getattr(twin, f.name) for f in fields(TreeIdentity)}, action=action, root=settings.root,
        env=exports(settings, twin).mapping(environ.get("PYTHONPATH")), env_file=settings.env_file,
        prepend=list(twin.pythonpath_prepend), durations=durations, run_id=run_id, reason=reason, log=log,
        elapsed_s=elapsed_s, link_mode=twin.link_mode, conflicts=list(twin.conflicts), mlir=twin.mlir,
    )


def warm_result(settings: Settings, environ: Mapping[str, str], twin: EnvTwin, seconds: float,
                run_id: Optional[str] = None) -> Result:
    return result_of(settings, environ, twin, Action.WARM, durations={"fingerprint": seconds},
                     run_id=run_id or os.urandom(6).hex(), elapsed_s=seconds,
                     reason=f"nothing changed since run {twin.run_id or 'of an earlier version'} wrote "
                     f"{settings.env_file}")


def warm_lines(settings: Settings, result: Result) -> List[str]:
    """What a warm call says, in order (the first line alone under ``--json``)."""
    return [f"nothing changed since the last success (fingerprint); {settings.env_file} is current",
            *(broken_user_line(user, result.version) for user in result.conflicts),
            *(f"warning: {shadow}" for shadow in shadowing(settings.require)),
            f"ready: flydsl {known(result.version)} ({known(result.how)}) for {known(result.python)}; "
            f"source {result.env_file}"]


def keep_warm(settings: Settings, environ: Mapping[str, str], tokens: Optional[Sequence[str]], twin: EnvTwin,
              print_now: Mapping[str, object]) -> None:
    """Record in the front door's stamp that these raw inputs get ``twin`` while the fingerprint holds."""
    twin_id = warm.file_identity(settings.env_json)
    if tokens is None or settings.verify or print_now.get("interpreter") is None or twin_id is None:
        return
    try:
        cwd = os.getcwd()
    except OSError:
        return
    root, env_file = settings.root, exports(settings, twin).text().encode()
    result = warm_result(settings, environ, twin, 0.0, "\0run_id")  # "\0NAME": a hole the front door fills
    say = warm_lines(settings, result)
    out = _template({**result.to_json(), "durations": "\0durations", "elapsed_s": "\0elapsed"},
                    "durations", "elapsed", "run_id")
    err = _template({"event": "message", "time": "\0time", "text": say[0]}, "time")
    if out is None or err is None:
        return
    named = (*VARIABLES, *(name for name in environ if name.startswith("FLYDSL_")))  # the front door's rule
    entry = {"argv": list(tokens), "cwd": cwd, "environ": {name: environ.get(name) for name in named},
             "python": settings.python, "executable": twin.python, "fail_marker": settings.fail_marker,
             "print": {k: print_now[k] for k in CALLER_KEYS}, "say": say, "out": out, "err": err,
             "shadows": {path: os.path.exists(path) for path in shadow_candidates(settings.require)}}
    tree = {"watch": list(twin.watch), "site_dirs": list(twin.site_dirs), "stamp": stamp_file(root, "tree"),
            "folders": list(twin.pythonpath_prepend)}
    shared = {k: v for k, v in print_now.items() if k not in CALLER_KEYS}
    stamp = warm.read_stamp(root)
    entries = []
    if stamp is not None and stamp["twin"] == twin_id and stamp["env_file"] == env_file and stamp["print"] == shared:
        entries = [e for e in stamp["entries"] if isinstance(e, dict)  # type: ignore[attr-defined]
                   and (e.get("argv"), e.get("cwd"), e.get("environ")) != (entry["argv"], cwd, entry["environ"])]
    new = {"format": warm.STAMP_FORMAT, "root": root, "env_file": env_file, "twin": twin_id, "tree": tree,
           "print": shared, "entries": [entry, *entries][:MAX_ENTRIES]}
    try:
        os.makedirs(os.path.dirname(warm_stamp(root)), exist_ok=True)
        atomic_write(warm_stamp(root), marshal.dumps(new), durable=False)  # a lost stamp is only a miss
    except (OSError, ValueError):
        pass  # a read-only root (or one of another user's): the command line answers, a little slower


def _template(data: Mapping[str, object], *names: str) -> Optional[List[str]]:
    """``data``'s JSON line cut at its holes (texts at even places, names at odd); None unless each is once."""
    parts = re.split(r'"\\u0000(\w+)"', json.dumps(data, sort_keys=True) + "\n")
    return parts if sorted(parts[1::2]) == sorted(names) else None
