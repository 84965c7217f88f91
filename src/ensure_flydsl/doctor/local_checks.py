"""The doctor's shared checks on this machine, one function each: the interpreter, the root, the failure
marker's sharing, git.  The ways' own checks are in their packages (``ways/*/checks.py``).

Each returns a :class:`Check` (ok / missing / wrong / skipped, the detail, the remedy, whether it blocks
the configured strategy, the step that would fail, whether the tool provides it itself).
:mod:`ensure_flydsl.doctor.diagnose` runs them concurrently and gives the verdict.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from typing import Mapping, Optional, Tuple

from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.runs.answer import roots_sharing_marker, sharing_advice
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.root import RootKind, classify_root, creatable_problem
from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, passed


def check_interpreter(settings: Settings, environ: Mapping[str, str],
                      known: Optional[Interpreter] = None) -> Tuple[Check, Optional[Interpreter]]:
    """The target interpreter described by a probe, or ``known`` (the caller's description of it) as it is."""
    label = settings.label("python")
    try:
        interp = known or describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                               timeout_label=settings.label("probe_timeout"))
    except EnsureError as exc:
        return Check(name="interpreter", status=WRONG, detail=f"{label}={settings.python}: {exc.reason}",
                     remedy=f"set {label} to the Python interpreter that will import FlyDSL", blocking=True,
                     stage=Stage.SETTINGS), None
    return passed("interpreter", f"{interp.executable} {interp.version} ({interp.abi})", Stage.SETTINGS), interp


def check_root(settings: Settings) -> Check:
    root, label = settings.root, settings.label("root")
    problem = None if os.path.lexists(root) else creatable_problem(root)
    if problem is not None:
        return Check(name="root", status=WRONG, detail=f"{root} cannot be created: {problem[1]}",
                     remedy=f"set {label} to a folder this user can create", blocking=True, stage=Stage.SETTINGS)
    state = classify_root(root, settings.repo)
    if state.kind is RootKind.FOREIGN:
        return Check(name="root", status=WRONG, detail=f"{root}: {state.reason}",
                     remedy=f"set {label} to an empty or new folder (ensure-flydsl never overwrites others' files)",
                     blocking=True, stage=Stage.SETTINGS)
    return passed("root", f"{root} ({state.kind}{': ' + state.reason if state.reason else ''})", Stage.SETTINGS)


def check_marker_sharing(settings: Settings) -> Check:
    sharing = roots_sharing_marker(settings)
    if not sharing:
        return passed("fail-marker", f"{settings.fail_marker} is this root's alone", Stage.SETTINGS)
    advice = sharing_advice(settings, sharing)
    return Check(name="fail-marker", status=WRONG, detail=advice.problem, remedy=advice.remedy, blocking=False,
                 stage=Stage.SETTINGS)


def check_git(environ: Mapping[str, str]) -> Check:
    exe = shutil.which("git", path=environ.get("PATH"))
    if exe is None:
        return Check(name="git", status=MISSING, detail="git is not on PATH; it fetches the pin (and LLVM)",
                     remedy="install git (your OS package) or put it on PATH", blocking=True, stage=Stage.FETCH)
    try:
        out = run_captured([exe, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=20).stdout.decode(errors="replace").strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(name="git", status=WRONG, detail=f"{exe} does not run: {exc}", remedy="reinstall git",
                     blocking=True, stage=Stage.FETCH)
    return passed("git", f"{out} at {exe}", Stage.FETCH)


def installer_python(interp: Optional[Interpreter], settings: Settings) -> str:
    """Whose pip asks the index: this tool's interpreter (it installs the private tools), else the target's."""
    if importlib.util.find_spec("pip") is not None:
        return sys.executable
    return interp.executable if interp else settings.python
