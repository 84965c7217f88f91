"""What every way does with the tree it makes: its identity on every host, ``build-fly`` prepared for it,
the probe that verifies it (beside a byte-compile)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import build_dir, build_made_record, packages_dir, tree_folders
from ensure_flydsl.probe.gate import Verdict, evaluate, same_folder
from ensure_flydsl.probe.interpreter import EarlyProbe, probe_modules, run_probe
from ensure_flydsl.probe.results import Probe
from ensure_flydsl.result import How
from ensure_flydsl.source.root import recording, remove_made
from ensure_flydsl.support.files import move_aside
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.processes import kill_and_reap, spawn
from ensure_flydsl.support.urls import repo_identity
from ensure_flydsl.ways.base import Early
from ensure_flydsl.ways.context import Decision, Run


def tree_identity(run: Run, commit: str) -> Dict[str, object]:
    """What identifies a tree on every host, whatever way made it: the cache's and the store's keys hold it."""
    return {"repo": repo_identity(run.settings.repo), "commit": commit, "abi": run.interpreter.abi,
            "platform": run.interpreter.platform}


def judge_tree(run: Run, prefix: List[str], warm: Optional[EarlyProbe] = None) -> Tuple[Probe, Verdict]:
    """The probe with ``prefix`` first on PYTHONPATH (in ``warm`` when it was started for exactly this probe),
    and the gate's verdict on it for the run's request."""
    s = run.settings
    modules, timeout, label = probe_modules(s.require), s.probe_timeout, s.label("probe_timeout")
    probe = None
    if warm is not None:
        probe = warm.answer(s.python, modules=modules, prefix=prefix, environ=run.environ, timeout=timeout,
                            timeout_label=label)
    if probe is None:
        probe = run_probe(s.python, modules=modules, prefix=prefix, environ=run.environ, timeout=timeout,
                          timeout_label=label)
    return probe, evaluate(probe, s.min_version, s.require, prefix)


@contextlib.contextmanager
def building(run: Run, key: Mapping[str, object]) -> Iterator[str]:
    """Around a build (or install) into ``ROOT/build-fly`` with inputs ``key``: the stamp begun, what our steps made
    there for other inputs removed, anything else moved aside (never deleted), what the body makes recorded as ours."""
    folder = build_dir(run.settings.root)
    started = run.stamps.started_key("build")
    if os.path.lexists(folder):
        if started is None:
            moved = move_aside(folder)
            run.say(f"moved {folder}, which ensure-flydsl did not make, to {moved}")
        elif started != key:
            # Somebody's notes or dumps there go aside with the folder: the build starts clean, nothing is lost.
            why = "it was made for another commit, interpreter, MLIR or release"
            kept = remove_made(folder, build_made_record(run.settings.root))
            if os.path.lexists(folder):
                moved = move_aside(folder)
                shown = ", ".join(kept[:5]) + (", ..." if len(kept) > 5 else "")
                run.say(f"removed what ensure-flydsl made in {folder} ({why}); the rest, which it did not make "
                        f"({shown}), is kept in {moved}")
            else:
                run.say(f"removed {folder}: {why}")
        elif not run.stamps.done("build", key):
            run.say(f"resuming the interrupted build in {folder}")
    run.stamps.begin("build", key)
    os.makedirs(folder, exist_ok=True)
    with recording(folder, build_made_record(run.settings.root)):  # clean removes only what it made
        yield folder


POOL_FROM = 32  # modules: from here on, compileall's pool of a worker per core pays for its start


def _compile_jobs(folders: List[str]) -> str:
    """compileall's ``-j``: ``0`` (a worker per core) for many modules, ``1`` for a few (a pool's start is
    about 40 ms of a 6-module tree's 80 ms)."""
    count = 0
    for folder in folders:
        for _path, _folders, files in os.walk(folder):
            count += sum(name.endswith(".py") for name in files)
            if count >= POOL_FROM:
                return "0"
    return "1"


class TreeDoesNotImport(EnsureError):
    """The probe of a finished tree fails (exit 6); ``probe`` tells a fault of the tree from the interpreter's."""

    def __init__(self, reason: str, probe: Probe, hint: str) -> None:
        super().__init__(ExitCode.PROBE, reason, stage=Stage.VERIFY, hint=hint)
        self.probe = probe


def verify_tree(run: Run, commit: str, how: How, early: Optional[Early] = None) -> Decision:
    """The full probe of the new tree, in the early probe's interpreter when ``early`` still has it."""
    settings = run.settings
    prefix = tree_folders(settings.root)
    # Byte-compiled while the probe runs (a wheel comes without bytecode): later imports skip about 1.2 s of
    # compiling; each .pyc is written atomically.  Stopped if the probe fails.
    folders = [f for f in (packages_dir(settings.root), os.path.join(settings.root, "kernels")) if os.path.isdir(f)]
    proc = spawn([run.interpreter.executable, "-m", "compileall", "-q", "-j", _compile_jobs(folders), *folders],
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                 own_group=True) if folders else None
    try:
        probe, verdict = judge_tree(run, prefix, early.probe if early is not None else None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=900)
    finally:
        if proc is not None and proc.returncode is None:  # the probe failed, or compileall hangs
            kill_and_reap(proc)
    if not verdict.reusable:
        raise TreeDoesNotImport(
            f"{how}, but the import probe fails: {verdict.reason}", probe,
            hint="the build finished but the tree does not import for this interpreter; "
            f"see the module files and errors with `{command('verify')}`",
        )
    if not (verdict.tree and same_folder(verdict.tree, settings.root)):
        raise EnsureError(ExitCode.PROBE,
                          f"{how}, but the modules import from {verdict.tree}, not from the tree in {settings.root}",
                          stage=Stage.VERIFY)
    run.say(f"verified: {verdict.reason}")
    return Decision(ok=True, reason=verdict.reason, how=how, tree=settings.root, prepend=prefix, probe=probe,
                    verdict=verdict, commit=commit)
