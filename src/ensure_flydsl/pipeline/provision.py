"""Provisioning under the lock: fetch the pin and check its imports, then (the build begins) withdraw the env file,
check the pin out, take the first way's verified tree, stamp and publish it (nothing a poller reads changes before)."""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import replace
from typing import List, Mapping, Optional

from ensure_flydsl.doctor.diagnose import Finding, assess, run_checks, stop_if_blocked, stop_if_missing, summary
from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Stage
from ensure_flydsl.layout import packages_dir, tree_folders, wheel_download_dir
from ensure_flydsl.pipeline.decide import tree_key
from ensure_flydsl.pipeline.publish import publish
from ensure_flydsl.probe.gate import is_within
from ensure_flydsl.probe.interpreter import EarlyProbe, probe_modules
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.result import Action, Result
from ensure_flydsl.runs import markers
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import Checkout, CommitFiles
from ensure_flydsl.source.requirements import pin_as_tag, read_sources, release_tags
from ensure_flydsl.source.root import RootKind, RootState, claim_root, classify_root, exclude_from_git, is_ours
from ensure_flydsl.support import faults
from ensure_flydsl.support.files import folder_bytes, remove_tree
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.trees.local import HostStore
from ensure_flydsl.ways import Way, demands, tries
from ensure_flydsl.ways.base import Early, Provider, Shared
from ensure_flydsl.ways.cache.provider import open_run_cache
from ensure_flydsl.ways.context import Run, likely_route
from ensure_flydsl.ways.release.download import WheelDownload
from ensure_flydsl.ways.store import (
    StoreProvider,
    borrow_git_objects,
    give_git_objects,
    keep_in_store,
    open_run_store,
    store_key,
)
from ensure_flydsl.ways.table import ways_for


def provision(run: Run) -> Result:
    """Under the lock: the pin into the root, then the first way's verified tree (what started early stops)."""
    settings = run.settings
    # An absent or empty root becomes the tool's now; another tool's checkout only when the build starts.
    state = _root_state(run)
    if state.kind not in (RootKind.OURS, RootKind.ADOPTABLE):
        os.makedirs(settings.root, exist_ok=True)
        claim_root(settings.root, created=state.kind is RootKind.ABSENT, adopted=False)
    faults.point("root-claimed")
    store = open_run_store(run)
    with contextlib.ExitStack() as started:
        early = Early()
        started.callback(remove_tree, wheel_download_dir(settings.root))
        started.callback(early.stop_download)
        started.callback(early.stop_probe)
        with run.step(Stage.FETCH):
            commit = fetch(run, early, store)
        versions = release_tags(Checkout.of(settings, run.environ).tags_at(commit))  # X when a release tag vX names it
        release = versions[0] if versions else None
        # A stored tree of the pin whose probe answers: its imports are known to work as things are.
        unprobed = store is not None and StoreProvider(store, release, early).answers_unprobed(run, commit)
        with run.step(Stage.REQUIREMENTS):
            finding = None if unprobed else check_requirements(run, commit)
            if unprobed:
                run.say("requirements: not checked: the host store's tree of this pin passed the full probe with "
                        f"{run.interpreter.executable} as it is now")
        cache = open_run_cache(run) if tries(settings.strategy, Way.CACHE) else None
        shared = Shared(commit=commit, release=release, early=early, cache=cache, store=store,
                        doctor=doctor_before_build)
        # The ways that apply to this run, in the table's order (a demanded release that is none stops here).
        providers = [p for p in (way.for_run(run, shared) for way in ways_for(settings.strategy)) if p is not None]
        # The likeliest route: each way takes its own when its turn comes.
        run.tracker.expect(next(p.route for p in providers if p.route is not None))
        with run.step(Stage.FETCH):
            force = refuse_local_changes(run)
            begin_build(run)
            checkout_pin(run, commit, force=force)
        if finding is not None and finding.needed and providers[0].way is not Way.SOURCE:
            # The final probe's interpreter starts now, importing what is slow (torch) while the tree is put in
            # place; a source build stops it (memory).
            preload = [r.module for r in finding.needed]
            early.probe = EarlyProbe(settings.python, modules=probe_modules(settings.require), environ=run.environ,
                                     prefix=tree_folders(settings.root), preload=preload)
            run.say(f"importing {', '.join(preload)} in {settings.python} while the tree is put in place")
        return first_tree(run, shared, providers)


def first_tree(run: Run, shared: Shared, providers: List[Provider]) -> Result:
    """The first provider's verified tree: kept in the host store, stamped as finished for this request, published."""
    commit, settings = shared.commit, run.settings
    for provider in providers:
        try:
            decision = provider.provide(run, commit)
            if decision is None:
                continue
            if shared.store is not None:
                keep_in_store(run, shared.store, commit, decision, shared.release)
            faults.point("verified")
            run.stamps.finish("tree", tree_key(settings, commit, run.interpreter), how=decision.how, commit=commit,
                              version=decision.probe.version if decision.probe else None)
            made = replace(decision, commit=commit, pin=settings.pin, repo=settings.repo)
            result = publish(run, made, Action.PROVISIONED)
            provider.after_publish(run, commit)
            return result
        except BaseException as exc:
            provider.abandon(run, exc)  # a build lease held for the fleet records the failure
            raise
    raise EnsureError(ExitCode.INTERNAL, "no provider gave a tree", stage=Stage.PROVISION)  # source always does


def doctor_before_build(settings: Settings, environ: Mapping[str, str], checkout: str,
                        interpreter: Interpreter) -> None:
    """The source way's stop before an hour of compiling: the doctor's checks with what is known now."""
    stop_if_blocked(run_checks(settings, environ, checkout=checkout, interpreter=interpreter)[0], settings.strategy)


def check_requirements(run: Run, commit: str) -> Optional[Finding]:
    """Exit 6 before anything is built when the interpreter lacks a module the commit's code always imports."""
    settings, root = run.settings, run.settings.root
    try:
        sources = read_sources(CommitFiles(root, commit))
    except (CommandFailed, OSError, ValueError) as exc:
        run.say(f"requirements: not checked (the sources of {commit[:12]} cannot be read in {root}: {exc})")
        return None
    finding = assess(sources, run.interpreter.executable, settings.require, run.environ,
                     settings.probe_timeout, settings.label("probe_timeout"), settings.pin)
    stop_if_missing(finding)
    run.say(f"requirements: {summary(finding)}")
    return finding


def start_wheel_download(run: Run, early: Early, store: Optional[HostStore], commit: str, tags: List[str]) -> None:
    """A release's commit: its wheel downloads beside git's fetch (unless its tree is installed or stored)."""
    settings, root = run.settings, run.settings.root
    versions = release_tags(tags)
    run.tracker.expect(likely_route(settings, release_commit=bool(versions)))  # the refs tell: the ETA's route
    if not tries(settings.strategy, Way.RELEASE) or not versions or not is_ours(root):
        return  # (not ours: another tool's checkout, unclaimed before the build starts, holds nothing of ours yet)
    key = {"release": versions[0], "commit": commit, "abi": run.interpreter.abi}
    if run.stamps.done("build", key) and os.path.isdir(packages_dir(root)):
        return
    if store is not None and store.lookup(store_key(run, commit, versions[0]))[0] is not None:
        return  # the host store holds the wheel's tree: it is copied, not downloaded
    folder = wheel_download_dir(root)
    remove_tree(folder)  # a leftover of an interrupted run of ours
    try:
        early.download = WheelDownload(run.interpreter, versions[0], folder, run.environ)
    except (EnsureError, OSError):
        return  # the release provider meets the same problem and says it, at its turn
    run.say(f"release v{versions[0]}: downloading the flydsl=={versions[0]} wheel while the pin is fetched")


def _root_state(run: Run) -> RootState:
    """The root's state now, refused when it became another tool's since the preflight."""
    state = classify_root(run.settings.root, run.settings.repo)
    if state.kind is RootKind.FOREIGN:
        raise BadInput(run.settings.label("root"), run.settings.root, f"an empty or new folder; {state.reason}")
    return state


def fetch(run: Run, early: Early, store: Optional[HostStore] = None) -> str:
    """The pin's commit, fetched into the root's repository: objects and refs only, the work tree untouched."""
    settings, root = run.settings, run.settings.root
    pin = pin_as_tag(settings.pin) if demands(settings.strategy, Way.RELEASE) else settings.pin
    checkout = Checkout.of(settings, run.environ)
    checkout.clear_stale_git_locks(run.say)
    checkout.ensure_repository()
    exclude_from_git(root)
    shared = borrow_git_objects(run, store) if store is not None else None
    objects = os.path.join(root, ".git", "objects")
    before = folder_bytes(objects)
    commit = checkout.fetch_pin(pin, run.say, on_fetch=run.worked,
                                on_tags=functools.partial(start_wheel_download, run, early, store))
    after = folder_bytes(objects)  # what the fetch added (a gc beside it: unknown)
    run.facts.add_fetched("git", None if after < before else after - before)
    if shared is not None:
        give_git_objects(run, shared, commit)
    run.say(f"pin {pin} is commit {commit}")
    faults.point("fetched")
    return commit


def refuse_local_changes(run: Run) -> bool:
    """Refuse edits to tracked files (exit 3); whether the checkout is redone with --force."""
    root = run.settings.root
    started = run.stamps.started_key("checkout") if is_ours(root) else None
    if started is not None and not run.stamps.done("checkout", started):
        return True
    checkout = Checkout.of(run.settings, run.environ)
    found = checkout.tracked_changes() if checkout.head_commit() else []
    changed = [path for code, path in found if set(code.strip()) != {"D"}]  # the checkout restores a deleted file
    if changed:
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise EnsureError(
            ExitCode.CHECKOUT,
            f"the checkout in {root} has local changes to tracked files ({shown}); they are not the pin",
            stage=Stage.CHECKOUT,
            hint=f"save them elsewhere, then `git -C {root} checkout -- .`; ensure-flydsl never overwrites them",
        )
    return bool(found)


def begin_build(run: Run) -> None:
    """The root's tree changes now: its stamp goes, then an env file naming it (a run that probed the tree before
    sees the stamp gone once it has published), and another tool's checkout is adopted."""
    settings, root = run.settings, run.settings.root
    run.stamps.undo("tree")
    twin = markers.read_env_json(settings.env_json)
    names_root = twin is None or any(is_within(p, root) for p in [twin.tree, *twin.pythonpath_prepend])
    if names_root and markers.withdraw_env_file(settings.env_file, settings.env_json):
        what = f" (flydsl {twin.version}, {twin.how})" if twin is not None else ""
        run.say(f"took away {settings.env_file}{what}: the tree in {root} changes now for the pin {settings.pin}")
    if not is_ours(root):
        state = _root_state(run)
        claim_root(root, created=False, adopted=True)
        run.say(f"adopting {root}: {state.reason}")


def checkout_pin(run: Run, commit: str, *, force: bool) -> None:
    """The pin's commit, checked out in the root (submodules come later, for a source build only)."""
    settings, root, stamps = run.settings, run.settings.root, run.stamps
    checkout_key = {"commit": commit}
    checkout = Checkout.of(settings, run.environ)
    head = checkout.head_commit()
    if force or not (stamps.done("checkout", checkout_key) and head == commit):
        stamps.begin("checkout", checkout_key)
        faults.point("checkout-begun")
        checkout.checkout(commit, force=force)
        stamps.finish("checkout", checkout_key)
        run.say(f"checked out {commit[:12]} in {root}")
        faults.point("checked-out")
