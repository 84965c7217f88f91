"""Provisioning under the lock: claim the root, fetch and check out the pin, check that the interpreter has
the modules the pin's code imports, then ask the providers that apply (release wheel, binary cache, source
build), in that order, for a verified tree; stamp it, publish."""

from __future__ import annotations

import os
from typing import List, Optional

from ensure_flydsl.build.wheels import WheelDownload, pin_as_tag, release_tags
from ensure_flydsl.doctor.requirements import Finding, assess, stop_if_missing, summary
from ensure_flydsl.errors import BadInput, EnsureError, ExitCode
from ensure_flydsl.layout import packages_dir, tree_folders, wheel_download_dir
from ensure_flydsl.pipeline.decide import tree_key
from ensure_flydsl.pipeline.publish import publish
from ensure_flydsl.probe.interpreter import WarmProbe, probe_modules
from ensure_flydsl.providers.base import Provider
from ensure_flydsl.providers.cache import CacheProvider, open_run_cache
from ensure_flydsl.providers.release import ReleaseProvider
from ensure_flydsl.providers.source import SourceProvider
from ensure_flydsl.result import Action, Result
from ensure_flydsl.runs.context import Decision, Run
from ensure_flydsl.setting_values import GitMirrors
from ensure_flydsl.source import git as gitsource
from ensure_flydsl.source.requirements import CheckoutSources, readable_checkout
from ensure_flydsl.source.root import claim_root, classify_root, exclude_from_git, remove_tree
from ensure_flydsl.support import faults


def provision(run: Run) -> Result:
    """Under the lock: the pin into the root, then the first provider that gives a verified tree.  What the
    run started early (the wheel's download, the probe's interpreter) is stopped when it ends, however."""
    claim_for_build(run)
    try:
        with run.step("fetch"):
            commit = fetch_and_checkout(run)
        with run.step("requirements"):
            finding = check_requirements(run)
        providers = providers_for(run, commit)
        if finding is not None and finding.needed and providers[0].name != "source":
            start_warm_probe(run, [r.module for r in finding.needed])
        return first_tree(run, commit, providers)
    finally:
        if run.warm_probe is not None:
            run.warm_probe.close()
            run.warm_probe = None
        stop_wheel_download(run)


def first_tree(run: Run, commit: str, providers: List[Provider]) -> Result:
    for provider in providers:
        try:
            decision = provider.provide(run, commit)
            if decision is not None:
                result = finish(run, commit, decision)
                provider.after_publish(run, commit)
                return result
        except BaseException as exc:
            provider.abandon(run, exc)  # a build lease held for the fleet records the failure
            raise
    raise EnsureError(ExitCode.INTERNAL, "no provider gave a tree", stage="provision")  # source always does


def providers_for(run: Run, commit: str) -> List[Provider]:
    """Release when the pin is a release tag's commit (``auto``) or demanded; the cache when one is set;
    the source build unless a release was demanded."""
    settings = run.settings
    version = release_version(run, commit)
    if settings.strategy == "release" and version is None:
        raise EnsureError(
            ExitCode.ARTIFACT,
            f"the pin {settings.pin} (commit {commit[:12]}) is not the commit of a release tag vX.Y.Z",
            stage="release",
            hint="pin a release tag (for example v0.2.2) or a version (0.2.2), or use FLYDSL_STRATEGY=source",
        )
    providers: List[Provider] = []
    if version is not None and settings.strategy in ("auto", "release"):
        providers.append(ReleaseProvider(version, demanded=settings.strategy == "release"))
    if settings.strategy == "release":
        return providers
    cache = open_run_cache(run)
    if cache is not None:
        providers.append(CacheProvider(cache))
    providers.append(SourceProvider(cache))
    return providers


def check_requirements(run: Run) -> Optional[Finding]:
    """Stop before anything is installed or built when the interpreter lacks a module the pin's code imports
    unconditionally (exit 6): such a tree could never pass the final probe.  Return what it found."""
    settings, root = run.settings, run.settings.root
    if not readable_checkout(root):
        run.say(f"requirements: not checked ({root} does not hold the tree's package sources)")
        return None
    finding = assess(CheckoutSources(root), run.interpreter.executable, settings.require, run.environ,
                     settings.probe_timeout, settings.label("probe_timeout"), settings.pin)
    stop_if_missing(finding)
    run.say(f"requirements: {summary(finding)}; {finding.python} has them all")
    return finding


def start_wheel_download(run: Run, commit: str, tags: List[str]) -> None:
    """The refs say the pin is a release's commit: under ``auto`` or ``release``, start downloading its wheel
    now, beside git's fetch of the pin (the release provider takes it over).  Not when that wheel is already
    installed in the root; a requirements check that fails later stops it and removes what it fetched."""
    settings, root = run.settings, run.settings.root
    versions = release_tags(tags)
    if settings.strategy not in ("auto", "release") or not versions:
        return
    key = {"release": versions[0], "commit": commit, "abi": run.interpreter.abi}
    if run.stamps.done("build", key) and os.path.isdir(packages_dir(root)):
        return
    folder = wheel_download_dir(root)
    remove_tree(folder)  # a leftover of an interrupted run of ours
    try:
        run.wheel_download = WheelDownload(run.interpreter, versions[0], folder)
    except (EnsureError, OSError):
        return  # the release provider meets the same problem and says it, at its turn
    run.say(f"release v{versions[0]}: downloading the flydsl=={versions[0]} wheel while the pin is fetched")


def stop_wheel_download(run: Run) -> None:
    if run.wheel_download is not None:
        run.wheel_download.abort()
        run.wheel_download = None
    remove_tree(wheel_download_dir(run.settings.root))


def start_warm_probe(run: Run, preload: List[str]) -> None:
    """Start the final probe's interpreter now, importing ``preload`` (torch alone takes seconds) while the
    wheel or the cache entry is fetched and unpacked; a source build, an hour long, stops it (memory)."""
    s = run.settings
    run.warm_probe = WarmProbe(s.python, modules=probe_modules(s.require), prefix=tree_folders(s.root),
                               environ=run.environ, preload=preload)
    run.say(f"importing {', '.join(preload)} in {s.python} while the tree is put in place")


def finish(run: Run, commit: str, decision: Decision) -> Result:
    """The tree is verified: stamp it as finished for this request, then publish the env file."""
    faults.point("verified")
    run.stamps.finish("tree", tree_key(run.settings, commit, run.interpreter), how=decision.how, commit=commit,
                      version=decision.probe.version if decision.probe else None)
    return publish(run, decision, Action.PROVISIONED)


def claim_for_build(run: Run) -> None:
    settings, root = run.settings, run.settings.root
    state = classify_root(root, settings.repo)
    if state.kind == "foreign":  # changed since the preflight
        raise BadInput(settings.label("root"), root, f"an empty or new folder; {state.reason}")
    if state.kind != "ours":
        os.makedirs(root, exist_ok=True)
        claim_root(root, created=state.kind == "absent", adopted=state.kind == "adoptable")
        if state.kind == "adoptable":
            run.say(f"adopting {root}: {state.reason}")
    faults.point("root-claimed")


def fetch_and_checkout(run: Run) -> str:
    """The pin's commit, checked out in the root (submodules come later, for a source build only)."""
    settings, root, stamps = run.settings, run.settings.root, run.stamps
    pin = pin_as_tag(settings.pin) if settings.strategy == "release" else settings.pin
    gitsource.clear_stale_git_locks(root, run.say)
    gitsource.ensure_repository(root, settings.repo, mirrors=settings.git_mirrors)
    exclude_from_git(root)
    commit = gitsource.fetch_pin(root, pin, settings.repo, run.say, mirrors=settings.git_mirrors,
                                 on_fetch=run.worked, on_tags=lambda sha, tags: start_wheel_download(run, sha, tags))
    run.say(f"pin {pin} is commit {commit}")
    faults.point("fetched")
    checkout_key = {"commit": commit}
    started = stamps.started_key("checkout")
    interrupted = started is not None and not stamps.done("checkout", started)
    deleted = False if interrupted else check_local_changes(root, settings.repo, settings.git_mirrors)
    head = gitsource.head_commit(root, settings.repo, mirrors=settings.git_mirrors)
    if deleted or not (stamps.done("checkout", checkout_key) and head == commit):
        stamps.begin("checkout", checkout_key)
        faults.point("checkout-begun")
        gitsource.checkout(root, commit, settings.repo, force=interrupted or deleted, mirrors=settings.git_mirrors)
        stamps.finish("checkout", checkout_key)
        run.say(f"checked out {commit[:12]} in {root}")
        faults.point("checked-out")
    return commit


def check_local_changes(root: str, repo: str, mirrors: GitMirrors) -> bool:
    """Refuse edits to tracked files: somebody's work and not the pin, never built, never overwritten.
    Return whether tracked files were deleted (those are restored: nothing of anybody's is lost)."""
    found = (gitsource.tracked_changes(root, repo, mirrors=mirrors)
             if gitsource.head_commit(root, repo, mirrors=mirrors) else [])
    changed = [path for code, path in found if not gitsource.is_deletion(code)]
    if changed:
        shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
        raise EnsureError(
            ExitCode.CHECKOUT,
            f"the checkout in {root} has local changes to tracked files ({shown}); they are not the pin",
            stage="checkout",
            hint=f"save them elsewhere, then `git -C {root} checkout -- .`; ensure-flydsl never overwrites them",
        )
    return bool(found)


def release_version(run: Run, commit: str) -> Optional[str]:
    """X when the commit is the one a release tag vX names (the newest, if several do)."""
    settings = run.settings
    versions = release_tags(gitsource.tags_at(settings.root, commit, settings.repo, mirrors=settings.git_mirrors))
    return versions[0] if versions else None
