"""What every provider does to the tree it makes: prepare ``build-fly``, byte-compile, verify with the probe."""

from __future__ import annotations

import os
from typing import List, Mapping

from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.layout import build_dir, packages_dir, tree_folders
from ensure_flydsl.probe.gate import evaluate, same_folder
from ensure_flydsl.probe.interpreter import Probe, probe_modules, run_probe
from ensure_flydsl.result import How
from ensure_flydsl.runs.context import Decision, Run
from ensure_flydsl.source.root import move_aside, remove_tree
from ensure_flydsl.support.processes import cmd_output


def probe_tree(run: Run, prefix: List[str]) -> Probe:
    """The final probe: in the interpreter the run started early (it has imported the heavy modules by
    now) when it was started for exactly this probe, else in a fresh one."""
    s = run.settings
    modules, timeout, label = probe_modules(s.require), s.probe_timeout, s.label("probe_timeout")
    warm, run.warm_probe = run.warm_probe, None
    probe = None
    if warm is not None:
        probe = warm.answer(s.python, modules=modules, prefix=prefix, environ=run.environ, timeout=timeout,
                            timeout_label=label)
    if probe is None:
        probe = run_probe(s.python, modules=modules, prefix=prefix, environ=run.environ, timeout=timeout,
                          timeout_label=label)
    return probe


def prepare_build_dir(run: Run, key: Mapping[str, object]) -> str:
    """``ROOT/build-fly`` ready for a build (or wheel install) with inputs ``key``: one of ours made for
    other inputs is removed, one the tool did not make is moved aside (never deleted)."""
    folder = build_dir(run.settings.root)
    started = run.stamps.started_key("build")
    if os.path.lexists(folder):
        if started is None:
            moved = move_aside(folder)
            run.say(f"moved {folder}, which ensure-flydsl did not make, to {moved}")
        elif started != key:
            run.say(f"removing {folder}: it was made for another commit, interpreter, MLIR or release")
            remove_tree(folder)
        elif not run.stamps.done("build", key):
            run.say(f"resuming the interrupted build in {folder}")
    return folder


def compile_tree(run: Run) -> None:
    """Byte-compile the tree once, with the target interpreter: the probe and every later import then skip
    compiling FlyDSL's modules (about 1.2 s of each cold import; a wheel is installed with --no-compile
    because pip would compile for the tool's own Python).  Cached trees carry their bytecode along."""
    root = run.settings.root
    folders = [f for f in (packages_dir(root), os.path.join(root, "kernels")) if os.path.isdir(f)]
    if folders:
        cmd_output([run.interpreter.executable, "-m", "compileall", "-q", "-j", "0", *folders], check=False,
                   timeout=900)


class TreeDoesNotImport(EnsureError):
    """The probe of a finished tree fails (exit 6); ``probe`` is what it saw, for a provider that must tell
    a fault of what it installed from one of the interpreter's."""

    def __init__(self, reason: str, probe: Probe, hint: str) -> None:
        super().__init__(ExitCode.PROBE, reason, stage="verify", hint=hint)
        self.probe = probe


def verify_tree(run: Run, commit: str, how: How) -> Decision:
    settings = run.settings
    prefix = tree_folders(settings.root)
    compile_tree(run)
    probe = probe_tree(run, prefix)
    verdict = evaluate(probe, settings.min_version, settings.require)
    if not verdict.reusable:
        raise TreeDoesNotImport(
            f"{how}, but the import probe fails: {verdict.reason}", probe,
            hint="the build finished but the tree does not import for this interpreter; "
            "see the module files and errors with `ensure-flydsl verify`",
        )
    if not (verdict.tree and same_folder(verdict.tree, settings.root)):
        raise EnsureError(
            ExitCode.PROBE,
            f"{how}, but the modules import from {verdict.tree}, not from the tree in {settings.root}",
            stage="verify",
        )
    run.say(f"verified: {verdict.reason}")
    return Decision(True, verdict.reason, how, settings.root, prefix, probe, verdict, commit)
