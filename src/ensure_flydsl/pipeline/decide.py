"""Before anything is touched: the checks that can refuse a request, the probe, and the reuse decision."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from typing import Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Stage
from ensure_flydsl.layout import stamp_file, tree_folders
from ensure_flydsl.probe.gate import TREE_PACKAGES, Verdict, is_within, same_folder
from ensure_flydsl.probe.interpreter import ProbeBroke, describe_interpreter
from ensure_flydsl.probe.results import Interpreter, Probe
from ensure_flydsl.result import How
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.source.root import RootKind, Stamp, classify_root, creatable_problem, is_ours
from ensure_flydsl.support.files import file_path_problem
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.trees.backends import CacheError
from ensure_flydsl.trees.local import store_problem
from ensure_flydsl.trees.remote import open_cache
from ensure_flydsl.warm import file_identity
from ensure_flydsl.ways import provisions
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, passed, skipped
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.source.environment import is_mlir_install
from ensure_flydsl.ways.tree import judge_tree

# What to do when nothing is reusable and the strategy (reuse-only) never provisions.
REUSE_ONLY_HINT = "install FlyDSL for this interpreter, or use FLYDSL_STRATEGY=auto to build the pin"
Refusal = Tuple[str, str, str]  # a BadInput's words: the setting as given, its value as shown, what is allowed


def _not_creatable(label: str, value: str, folder: str) -> Iterator[Refusal]:
    problem = creatable_problem(folder)
    if problem is not None:
        yield label, value, f"{problem[0]}; {problem[1]}"


def _refusals(settings: Settings, writes: bool) -> Iterator[Refusal]:
    """Why the request's paths are refused, in order; lazy: the first refusal ends the checks."""
    root, label = settings.root, settings.label("root")
    if not os.path.lexists(root):
        yield from _not_creatable(label, root, root)
    state = classify_root(root, settings.repo)
    if state.kind is RootKind.FOREIGN:
        yield label, root, f"an empty or new folder, or a checkout made by ensure-flydsl; {state.reason}"
    if writes:
        yield from _unwritable(settings)
    # The lock, the marker and the log (appended to) are files of their own; a symlink could redirect the lock or
    # the log to somebody's file (the marker is renamed into place: a symlink is fine).
    for name, path, symlink_ok, wanted in (("lock_file", settings.lock_file, False, "a lock file path"),
                                           ("fail_marker", settings.fail_marker, True, "a marker file path"),
                                           ("root", settings.log_file, False,
                                            f"a root whose log {settings.log_file} is a plain file")):
        problem = file_path_problem(path, symlink_ok=symlink_ok)
        if problem:
            yield settings.label(name), getattr(settings, name), f"{wanted}; {problem}"
    if settings.mlir_path is not None and not is_mlir_install(settings.mlir_path):
        yield settings.label("mlir_path"), settings.mlir_path, "an MLIR install prefix holding lib/cmake/mlir"
    if settings.store not in (None, "off"):  # given: one that cannot be made, written or trusted is bad input
        yield from _not_creatable(settings.label("store"), str(settings.store), str(settings.store))
        problem = store_problem(str(settings.store))
        if problem is not None:
            yield settings.label("store"), str(settings.store), f"a store folder of this user's; {problem}"
    if settings.cache is not None and settings.cache.startswith("/") and not os.path.isdir(settings.cache):
        # An existing folder this user cannot write in is used read-only.
        yield from _not_creatable(settings.label("cache"), settings.cache, settings.cache)
    if settings.cache is not None:
        try:
            open_cache(settings.cache)
        except CacheError as exc:
            yield settings.label("cache"), shown_location(settings.cache), f"a usable cache location; {exc}"


def _unwritable(settings: Settings) -> Iterator[Refusal]:
    """The lock or the failure marker cannot be created by this user (a run that provisions writes both)."""
    for name in ("lock_file", "fail_marker"):
        path = getattr(settings, name)
        yield from _not_creatable(settings.label(name), path, os.path.dirname(path))


def preflight(settings: Settings, environ: Mapping[str, str], *, writes: bool = True) -> Interpreter:
    """All that can refuse the request before a file is written: the paths, then the interpreter, described."""
    refused = next(_refusals(settings, writes), None)
    if refused is None:
        try:
            return describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                        timeout_label=settings.label("probe_timeout"))
        except EnsureError as exc:
            refused = settings.label("python"), settings.python, f"a Python interpreter that runs; {exc.reason}"
    raise BadInput(*refused) from None


def check_provisionable(settings: Settings, environ: Mapping[str, str], unreusable: str) -> None:
    """Nothing is reusable (``unreusable`` says why): the strategy provisions, git is on PATH, and (``--verify``) the
    lock and marker can be made."""
    if not provisions(settings.strategy):
        raise EnsureError(ExitCode.PROBE, f"nothing reusable ({unreusable}) and FLYDSL_STRATEGY=reuse-only never "
                          "provisions", stage=Stage.PROBE, hint=REUSE_ONLY_HINT)
    path = environ.get("PATH")
    if shutil.which("git", path=path) is None:
        raise BadInput("PATH", path or "", "a PATH with git on it (needed to fetch the pin)")
    refused = next(_unwritable(settings), None) if settings.verify else None
    if refused is not None:
        raise BadInput(*refused)


def _judged_or_broke(run: Run, prefix: List[str]) -> Union[Tuple[Probe, Verdict], ProbeBroke]:
    """The probe and its verdict, or how it broke importing the tree (elsewhere: an error no build fixes)."""
    try:
        return judge_tree(run, prefix)
    except ProbeBroke as exc:
        if exc.importing is None or exc.importing.split(".")[0] not in TREE_PACKAGES:
            raise
        return exc


def _reuse_elsewhere(run: Run, failed: Decision) -> Decision:
    """The root shadowed whatever else the interpreter has: look at that on its own (else ``failed`` stands)."""
    ambient = _judged_or_broke(run, [])
    if isinstance(ambient, ProbeBroke) or not ambient[1].reusable:
        reason = ambient.reason if isinstance(ambient, ProbeBroke) else ambient[1].reason
        run.say(f"nothing reusable elsewhere either: {reason}")
        return failed
    return _path_tree(run, *ambient) or failed


def _path_tree(run: Run, probe: Probe, verdict: Verdict) -> Optional[Decision]:
    """A tree on the interpreter's own path that passes the gate: reused (PYTHONPATH gets its folders not already
    on sys.path), unless --exact-pin refuses it."""
    if _exact_pin_refuses(run, f"found on the interpreter's path ({verdict.tree})"):
        return None
    run.say(f"reusing the tree found on the interpreter's path: {verdict.reason}")
    skip = {os.path.normpath(p) for p in probe.interpreter.site_dirs + (probe.interpreter.stdlib,)}
    prepend = list(dict.fromkeys(f for f in verdict.folders.values() if os.path.normpath(f) not in skip))
    return Decision(ok=True, reason=verdict.reason, how=How.REUSED, tree=verdict.tree, prepend=prepend, probe=probe,
                    verdict=verdict)


def tree_key(settings: Settings, commit: str, interpreter: Interpreter) -> Dict[str, object]:
    """What a finished tree in the root must have been made for to satisfy a request."""
    return {"repo": settings.repo, "pin": settings.pin, "commit": commit, "abi": interpreter.abi}


def _stamped_tree(run: Run) -> Tuple[Optional[Stamp], str]:
    """The root's tree's stamp when the gate may take it (this ABI; --exact-pin: this request), else why not."""
    stamp = run.stamps.read("tree")
    if stamp is None:
        return None, "its build did not finish (no stamp of a finished tree)"
    if run.settings.exact_pin:
        other = _other_request(run, stamp)
        if other is not None:
            return None, other
        moved = _pin_moved(run, str(stamp.key.get("commit"))) if run.settings.verify else None
        return (None, moved) if moved else (stamp, "")
    if stamp.key.get("abi") != run.interpreter.abi:
        return None, f"it was built for {stamp.key.get('abi')}, not for this interpreter's {run.interpreter.abi}"
    return stamp, ""


def _other_request(run: Run, stamp: Stamp) -> Optional[str]:
    """Under --exact-pin, why a tree stamped for another pin, repository or ABI is not this request's."""
    key = stamp.key
    if key == tree_key(run.settings, str(key.get("commit")), run.interpreter):
        return None
    return (f"it was built from {key.get('pin')} of {key.get('repo')} for {key.get('abi')}, and "
            f"{run.settings.label('exact_pin')} asks for a tree built from the pin {run.settings.pin} of "
            f"{shown_location(run.settings.repo)} for {run.interpreter.abi}")


def _pin_moved(run: Run, commit: str) -> Optional[str]:
    """Under --exact-pin --verify, why the tree is not the pin's any more (one ``ls-remote``); offline: kept."""
    pin = run.settings.pin
    try:
        now = Checkout.of(run.settings, run.environ).remote_commit(pin)
    except EnsureError as exc:
        run.say(f"{run.settings.label('verify')}: where {pin} points now is unknown ({exc.reason}); keeping the "
                f"tree built from {commit[:12]}")
        return None
    if now is None or now == commit:
        return None
    return (f"the pin {pin} names {now[:12]} in {shown_location(run.settings.repo)} now, and the tree was built "
            f"from {commit[:12]} (re-resolved under {run.settings.label('verify')})")


def _exact_pin_refuses(run: Run, where: str) -> bool:
    """Under --exact-pin, a tree not built by this tool from the pin is not reused (said once)."""
    if run.settings.exact_pin:
        run.say(f"not reusing the tree {where}: {run.settings.label('exact_pin')} takes only a tree built "
                f"from the pin {run.settings.pin}")
    return run.settings.exact_pin


def decide(run: Run, again: bool = False) -> Decision:
    """Probe with the root's folders first; reuse what passes the gate, else say why not."""
    settings, root = run.settings, run.settings.root
    before = "after taking the lock, still " if again else ""
    # Under --exact-pin, the root's tree stamped for another request is not probed at all.
    stamp = run.stamps.read("tree") if settings.exact_pin and is_ours(root) else None
    ruled_out = None if stamp is None else _other_request(run, stamp)
    if ruled_out is not None:
        run.say(f"{before}not probing the tree in {root}: {ruled_out}")
        return Decision(False, ruled_out, unprobed=True)
    prefix = tree_folders(root)
    judged = _judged_or_broke(run, prefix)
    if isinstance(judged, ProbeBroke):  # importing the root's tree: what it shadowed on the path may serve
        run.say(f"{before}no reusable FlyDSL: {judged.reason}")
        if judged.origin and is_within(judged.origin, root):
            return _reuse_elsewhere(run, Decision(False, judged.reason))
        run.say(f"a tree built in {root} comes first on PYTHONPATH and shadows that one: provisioning it")
        return Decision(False, judged.reason)
    probe, verdict = judged
    taken = Decision(ok=True, reason=verdict.reason, how=How.REUSED, tree=verdict.tree, prepend=prefix, probe=probe,
                     verdict=verdict)  # taking the root's tree, when it passes the gate
    if verdict.reusable and verdict.tree and same_folder(verdict.tree, root):
        if not is_ours(root):
            if not _exact_pin_refuses(run, f"in {root}, made by another tool"):
                run.say(f"found a working tree in {root} made by another tool: {verdict.reason}")
                return taken
        else:
            stamp, why = _stamped_tree(run)
            if stamp is not None:
                pin, repo = stamp.key.get("pin"), stamp.key.get("repo")
                if pin != settings.pin:
                    run.say(f"the tree in {root} was built from {pin}, not from the pin {settings.pin}; it "
                            f"passes the gate ({verdict.reason}), so it is reused: the pin is built only when "
                            f"a build is needed (raise {settings.label('min_version')}, or set FLYDSL_EXACT_PIN=1 "
                            "to take only a tree built from the pin)")
                return replace(taken, how=How(stamp.how or How.BUILT), tree=root, commit=str(stamp.key.get("commit")),
                               pin=str(pin) if pin else None, repo=str(repo) if repo else None)
            run.say(f"the tree in {root} imports, but {why}")
    elif verdict.reusable:
        found = _path_tree(run, probe, verdict)
        if found is not None:
            return found
    else:
        run.say(f"{before}no reusable FlyDSL with {root} first on PYTHONPATH: {verdict.reason}")
    failed = Decision(False, verdict.reason, probe=probe, verdict=verdict)
    return _reuse_elsewhere(run, failed) if verdict.from_first else failed  # the root's tree shadowed the rest


def stamp_seen(root: str) -> Optional[List[int]]:
    """The root's finished-tree stamp as it stands (a run replaces it, a build removes it), or None."""
    return file_identity(stamp_file(root, "tree"))


def decide_again(run: Run, first: Decision, seen: Optional[List[int]]) -> Decision:
    """Under the lock: the first decision stands if it probed and the root's stamp is unchanged, else decide."""
    if first.probe is not None and stamp_seen(run.settings.root) == seen:
        run.say(f"after taking the lock, still no reusable FlyDSL: no run finished a tree in {run.settings.root} "
                "meanwhile")
        return first
    return decide(run, again=True)


def check_reuse(settings: Settings, environ: Mapping[str, str], interp: Optional[Interpreter]) -> Check:
    """The doctor's "reuse" check: what ``ensure`` would decide first (then nothing is provisioned)."""
    if interp is None:
        return skipped("reuse", "the interpreter does not run", Stage.PROBE)
    run = Run(settings, Reporter(None), environ)
    run.interpreter = interp
    try:
        decision = decide(run)
    except EnsureError as exc:
        status, detail = WRONG, f"the import probe failed: {exc.reason}"
    else:
        if decision.ok:
            return passed("reuse", f"reusable: {decision.reason} (ensure will reuse it; nothing is built)", Stage.PROBE)
        status, detail = MISSING, f"nothing to reuse: {decision.reason}"
    blocking = not provisions(settings.strategy)
    remedy = REUSE_ONLY_HINT if blocking else "none needed: the configured strategy provisions one"
    return Check(name="reuse", status=status, detail=detail, remedy=remedy, blocking=blocking, stage=Stage.PROBE)
