"""The host store's way (trees/local.py): a stored tree for the pin and interpreter copied into the root, a tree
another way made kept; an accelerator: what cannot be used (damaged, distrusted) is said and gone without."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

from ensure_flydsl import layout
from ensure_flydsl.errors import Stage, disk_full_error
from ensure_flydsl.probe.fingerprint import interpreter_part
from ensure_flydsl.probe.gate import evaluate, is_within
from ensure_flydsl.probe.interpreter import joined_pythonpath, probe_modules
from ensure_flydsl.probe.results import ModuleResult, Probe
from ensure_flydsl.result import How
from ensure_flydsl.source.git import borrow_objects, give_objects, shared_repository
from ensure_flydsl.support.files import LockBusy, read_json, remove_file, remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.trees import local, signing
from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import CacheEntry, cache_key, hashed_members
from ensure_flydsl.ways import Way, tries
from ensure_flydsl.ways.base import Early, Provider, Shared
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.tree import building, tree_identity, verify_tree


def open_run_store(run: Run) -> Optional[local.HostStore]:
    """FLYDSL_STORE, else the default in the user's cache folder; None under ``off`` or when it cannot be used."""
    setting = run.settings.store
    if setting == "off":
        return None
    path = run.settings.store_folder(run.environ)
    if path is None:
        run.say("store: no host store (neither XDG_CACHE_HOME nor HOME names a folder); each root keeps its own tree")
        return None
    try:
        return local.HostStore.open(path, lock_timeout=run.settings.lock_timeout, say=run.say)
    except OSError as exc:
        named = f"{run.settings.label('store')}={path}" if setting else f"the default host store {path}"
        run.say(f"store: {named} cannot be used ({exc}); going on without a store (set FLYDSL_STORE to a "
                "writable folder, or FLYDSL_STORE=off to say none)")
        return None


def borrow_git_objects(run: Run, store: local.HostStore) -> Optional[str]:
    """Before the root's fetch: it borrows the host's shared git objects; the shared repository, or None (said).
    Git does not hash what it reads through an alternate: only objects this user alone can write are borrowed."""
    git_dir = os.path.join(run.settings.root, ".git")
    try:
        shared = shared_repository(store.path, run.environ)
        objects = os.path.join(shared, "objects")
        for path in [shared, objects, *(os.path.join(objects, name) for name in sorted(os.listdir(objects)))]:
            why = local.foreign(os.lstat(path))
            if why is not None:
                run.say(f"store: the host's git objects in {shared} are not borrowed: {path}: {why}; "
                        f"{run.settings.root} fetches its own")
                return None
        if borrow_objects(git_dir, shared):
            run.say(f"store: {git_dir} borrows the host's git objects from {shared} (objects/info/alternates)")
    except (OSError, CommandFailed) as exc:
        run.say(f"store: the host's git objects are not shared with {run.settings.root} ({exc}); it fetches its own")
        return None
    return shared


def give_git_objects(run: Run, shared: str, commit: str) -> None:
    """After the root's fetch: what it fetched goes into the shared repository, for the next root."""
    root = run.settings.root
    name = hashlib.sha256(os.fsencode(root)).hexdigest()[:16]
    try:
        give_objects(os.path.join(root, ".git"), shared, name, commit, run.environ, timeout=run.settings.lock_timeout,
                     say=run.say)
    except (OSError, CommandFailed, LockBusy) as exc:
        run.say(f"store: the objects fetched into {root} were not added to {shared} ({exc})")


def store_fields(run: Run, commit: str, release: Optional[str], root: Optional[str] = None) -> Dict[str, object]:
    """The key fields of a tree from the ``release`` wheel or (None) a build; ``root``: it holds its root's path."""
    made_from = release if release is not None else run.settings.mlir_path
    # format 2: trees copied, never hardlinked, sealed with their ctime; a tree of format 1 is never looked up
    return {**tree_identity(run, commit), "origin": "release" if release is not None else "source",
            "made_from": made_from, "root": root, "format": 2}


def store_key(run: Run, commit: str, release: Optional[str], root: Optional[str] = None) -> str:
    return cache_key("tree", store_fields(run, commit, release, root))


def interpreter_fingerprint(run: Run) -> Optional[Dict[str, object]]:
    """The run's interpreter as a stored probe's answer is keyed."""
    settings = run.settings
    return interpreter_part(settings.python, run.environ, run.interpreter, layout.tree_folders(settings.root),
                            probe_modules(settings.require))


def distrusted(run: Run, entry: CacheEntry) -> Optional[str]:
    """Why the run's trust settings would not take the stored tree, or None: one from the fleet cache is taken as its
    entry would be there (any without trusted keys, else one a key trusted now signed); built or released ones are."""
    settings = run.settings
    return None if entry.how != How.CACHED.value else signing.untrusted(
        entry.signed_by, settings.cache_trusted_keys, settings.label("cache_trusted_keys"))


@dataclass
class StoreProvider(Provider):
    """The host's stored tree for this pin and interpreter, copied into the root."""

    way = Way.STORE
    route = None
    store: local.HostStore
    release: Optional[str]
    early: Early

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> Optional[StoreProvider]:
        return None if shared.store is None else cls(shared.store, shared.release, shared.early)

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        for manifest in self._usable(run, commit, said=True):
            with run.step(Stage.CACHE):
                mode = self._place(run, manifest)
            if mode is not None:
                return self._verified(run, commit, manifest, mode)
        return None

    def _usable(self, run: Run, commit: str, *, said: bool = False) -> Iterator[CacheEntry]:
        """The stored trees that answer the run, best first (a damaged one removed, an untrusted one left; said)."""
        strategy, release = run.settings.strategy, self.release
        releases: List[Optional[str]] = [release] if release is not None and tries(strategy, Way.RELEASE) else []
        if tries(strategy, Way.SOURCE):
            releases.append(None)
        # the wheel's tree, then a build's; each also as this root's
        for key in (store_key(run, commit, made, where) for made in releases for where in (None, run.settings.root)):
            manifest, why = self.store.lookup(key)
            if manifest is None:
                if why != local.NOT_STORED and said:
                    self._drop(run, key, why)
                continue
            refused = distrusted(run, manifest)
            if refused is None:
                yield manifest
            elif said:
                run.say(f"store: the tree {key[:12]} in {self.store.path} is not used: {refused}")

    def answers_unprobed(self, run: Run, commit: str) -> bool:
        """Whether a stored tree for this pin passed the probe with this interpreter as it is now."""
        return any(self._known_pass(run, m.key) is not None for m in self._usable(run, commit))

    def _known_pass(self, run: Run, key: str) -> Optional[local.Passed]:
        """What the stored tree ``key``'s probe answered with this interpreter as it is now (not under --verify)."""
        fingerprint = None if run.settings.verify else interpreter_fingerprint(run)
        return self.store.passed(key, fingerprint, probe_modules(run.settings.require)) if fingerprint else None

    def _drop(self, run: Run, key: str, why: str) -> None:
        try:
            with self.store.locked():
                left = self.store.remove(key)
        except LockBusy as exc:
            left = str(exc)
        fate = "is removed from the store" if left is None else f"is left as it is ({left})"
        run.say(f"store: the tree {key[:12]} in {self.store.path} cannot be used ({why}); it is not copied, and "
                f"{fate}; fetching or building instead")

    def _place(self, run: Run, manifest: CacheEntry) -> Optional[str]:
        root = run.settings.root
        packages, staging = layout.packages_dir(root), layout.store_linking_dir(root)
        stamp_key = {"store": manifest.key, "commit": manifest.fields.get("commit")}
        placer = local.Placer()
        try:
            self.store.check(manifest, full=run.settings.verify)
        except CacheCorrupt as exc:
            self._drop(run, manifest.key, str(exc))
            return None
        with building(run, stamp_key):
            remove_tree(packages)
            remove_tree(staging)
            try:
                self.store.get(manifest, staging, placer)
            except OSError as exc:
                remove_tree(staging)
                # the copy's writes are the root's: a full disk is its file system (exit 5, as a build's)
                full = disk_full_error(OSError(exc.errno, exc.strerror, packages), None)
                if full is not None:
                    raise full from None
                if os.path.isdir(self.store.tree_dir(manifest.key)):
                    raise
                run.say(f"store: the tree {manifest.key[:12]} was removed from {self.store.path} (a prune) while it "
                        "was copied; fetching or building instead")
                return None
            rename_into_place(staging, packages)
        run.stamps.finish("build", stamp_key)
        mode = placer.mode or local.COPY
        run.worked()
        run.say(f"store: copied the {manifest.how} tree {manifest.key[:12]} ({manifest.files} files, "
                f"{manifest.size >> 20} MB) into {packages} by {mode}")
        return mode

    def _verified(self, run: Run, commit: str, manifest: CacheEntry, mode: str) -> Decision:
        """A probe's answer for this tree in another root while it passes the gate here; else a probe here, kept."""
        settings, how = run.settings, How(manifest.how)
        known = self._known_pass(run, manifest.key)
        if known is not None:
            prefix = layout.tree_folders(settings.root)
            modules = tuple(ModuleResult(name, os.path.join(settings.root, rel), None)
                            for name, rel in known.files.items())
            probe = Probe(interpreter=run.interpreter, modules=modules, version=known.version, version_error=None,
                          pythonpath=joined_pythonpath(prefix, run.environ.get("PYTHONPATH")), seconds=0.0)
            verdict = evaluate(probe, settings.min_version, settings.require)
            if verdict.reusable:
                run.say(f"store: not probed again: this tree passed the full probe with {run.interpreter.executable} "
                        "as it is now (--verify probes)")
                return Decision(ok=True, reason=verdict.reason, how=how, tree=settings.root, prepend=prefix,
                                probe=probe, verdict=verdict, commit=commit, link_mode=mode)
        with run.step(Stage.VERIFY):
            decision = verify_tree(run, commit, how, self.early)
        remember_pass(run, self.store, manifest.key, decision)
        decision.link_mode = mode
        return decision


def remember_pass(run: Run, store: local.HostStore, key: str, decision: Decision) -> None:
    """Record that the tree ``key`` passed the full probe here, its files relative to the root for other roots."""
    fingerprint = interpreter_fingerprint(run)
    root = run.settings.root
    files = decision.verdict.files if decision.verdict is not None else {}
    if fingerprint is None or decision.probe is None or decision.probe.version is None or not files \
            or not all(is_within(f, root) for f in files.values()):
        return
    relative = {name: os.path.relpath(f, root) for name, f in files.items()}
    try:
        with store.locked():
            store.remember(key, fingerprint, decision.probe.version, relative)
    except (OSError, LockBusy) as exc:
        run.say(f"store: could not record the probe of {key[:12]} ({exc}); another root probes it again")


def keep_in_store(run: Run, store: local.HostStore, commit: str, decision: Decision, release: Optional[str]) -> None:
    """Copy a tree another way installed and verified into the store; a failure to keep it never fails the run."""
    root = run.settings.root
    packages = layout.packages_dir(root)
    kept = (How.RELEASED, How.BUILT, How.CACHED)
    if decision.how not in kept or decision.link_mode is not None or not os.path.isdir(packages):
        return
    try:
        members, holding = hashed_members(packages, os.fsencode(root.rstrip("/") + "/"))
        if holding:
            run.say(f"store: the tree holds its root's path ({', '.join(holding[:3])}"
                    f"{', ...' if len(holding) > 3 else ''}): it is kept for {root} alone")
        fields = store_fields(run, commit, release if decision.how is How.RELEASED else None, root if holding else None)
        placer = local.Placer()
        manifest, added = store.put(cache_key("tree", fields), fields, packages, members, how=str(decision.how),
                                    signed_by=decision.signed_by, refuses=functools.partial(distrusted, run),
                                    placer=placer)
    except (OSError, CacheCorrupt, LockBusy) as exc:
        run.say(f"store: the tree was not kept in {store.path} ({exc}); the root's own tree is used")
        return
    if not added:
        run.say(f"store: the tree {manifest.key[:12]} was already in {store.path}")
        return
    remember_pass(run, store, manifest.key, decision)
    run.say(f"store: kept a copy of the tree {manifest.key[:12]} ({manifest.files} files, {manifest.size >> 20} MB) "
            f"in {store.path} by {placer.mode or local.COPY}; other roots copy it from there")


def shared_files_problem(run: Run) -> Optional[str]:
    """Why the root's tree must be copied again: an earlier version hardlinked it from the store; None otherwise."""
    root = run.settings.root
    record = read_json(layout.root_store_record(root))
    if record is None or record.get("link_mode") != "hardlink":
        return None
    return (f"the tree in {layout.packages_dir(root)} shares its files with the host store by hardlink (an earlier "
            "ensure-flydsl linked it), so an edit in another root would reach it")


def repair_shared_files(run: Run, problem: str) -> None:
    """Under the lock: the root's shared tree goes, so the run provisions it again (a copy of its own)."""
    root = run.settings.root
    remove_file(layout.root_store_record(root))
    run.stamps.undo("tree")
    run.stamps.undo("build")
    remove_tree(layout.packages_dir(root))
    run.say(f"store: {problem}; the root's tree is removed and provisioned again")
