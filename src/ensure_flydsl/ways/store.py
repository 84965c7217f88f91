"""The host store's way (trees/local.py): link a tree this host holds for the pin and interpreter into the root;
keep a tree another way made.  An accelerator: a store that cannot be used is said and gone without; a damaged
tree is said, removed and made again."""

from __future__ import annotations

import hashlib
import os
from typing import Dict, List, Optional

from ensure_flydsl import layout
from ensure_flydsl.errors import Stage
from ensure_flydsl.probe.fingerprint import interpreter_part
from ensure_flydsl.probe.gate import evaluate, is_within
from ensure_flydsl.probe.interpreter import joined_pythonpath, probe_modules
from ensure_flydsl.probe.results import ModuleResult, Probe
from ensure_flydsl.result import How
from ensure_flydsl.source.git import borrow_objects, give_objects, shared_repository
from ensure_flydsl.source.root import recording
from ensure_flydsl.support.files import remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.trees import local
from ensure_flydsl.trees.backends import CacheCorrupt
from ensure_flydsl.trees.manifest import CacheEntry, cache_key, hashed_members
from ensure_flydsl.ways import Way, tries
from ensure_flydsl.ways.base import Early, Provider, Shared
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.tree import prepare_build_dir, tree_identity, verify_tree


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
        store = local.HostStore.open(path)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(f"{path} is not writable by this user")
    except OSError as exc:
        named = f"{run.settings.label('store')}={path}" if setting else f"the default host store {path}"
        run.say(f"store: {named} cannot be used ({exc}); going on without a store (set FLYDSL_STORE to a "
                "writable folder, or FLYDSL_STORE=off to say none)")
        return None
    return store


def borrow_git_objects(run: Run, store: local.HostStore) -> Optional[str]:
    """Before the root's fetch: it borrows the host's shared git objects; the shared repository, or None (said)."""
    git_dir = os.path.join(run.settings.root, ".git")
    try:
        shared = shared_repository(store.path, run.environ)
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
        give_objects(os.path.join(root, ".git"), shared, name, commit, run.environ)
    except (OSError, CommandFailed) as exc:
        run.say(f"store: the objects fetched into {root} were not added to {shared} ({exc})")


def store_fields(run: Run, commit: str, release: Optional[str], root: Optional[str] = None) -> Dict[str, object]:
    """The key fields of a tree from the ``release`` wheel or (None) a build; ``root``: it holds its root's path."""
    made_from = release if release is not None else run.settings.mlir_path
    return {**tree_identity(run, commit), "origin": "release" if release is not None else "source",
            "made_from": made_from, "root": root}


def store_key(run: Run, commit: str, release: Optional[str], root: Optional[str] = None) -> str:
    return cache_key("tree", store_fields(run, commit, release, root))


def lookup_keys(run: Run, commit: str, release: Optional[str]) -> List[str]:
    """The keys that answer the strategy, best first: the wheel's tree, then a build's; each also as this root's."""
    strategy = run.settings.strategy
    releases: List[Optional[str]] = [release] if release is not None and tries(strategy, Way.RELEASE) else []
    if tries(strategy, Way.SOURCE):
        releases.append(None)
    return [store_key(run, commit, made, where) for made in releases for where in (None, run.settings.root)]


def interpreter_fingerprint(run: Run) -> Optional[Dict[str, object]]:
    """The run's interpreter as a stored probe's answer is keyed."""
    settings = run.settings
    return interpreter_part(settings.python, run.environ, run.interpreter, layout.tree_folders(settings.root),
                            probe_modules(settings.require))


class StoreProvider(Provider):
    """The host's stored tree for this pin and interpreter, linked into the root."""

    way = Way.STORE
    route = None

    def __init__(self, store: local.HostStore, release: Optional[str], early: Early) -> None:
        self.store, self.release, self.early = store, release, early

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> Optional[StoreProvider]:
        return None if shared.store is None else cls(shared.store, shared.release, shared.early)

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        for key in lookup_keys(run, commit, self.release):
            manifest, why = self.store.lookup(key)
            if manifest is None:
                if why != "not in the store":
                    self._drop(run, key, why)
                continue
            with run.step(Stage.CACHE):
                mode = self._link(run, manifest)
            if mode is not None:
                return self._verified(run, commit, manifest, mode)
        return None

    def answers_unprobed(self, run: Run, commit: str) -> bool:
        """Whether a stored tree for this pin passed the probe with this interpreter as it is now."""
        return any(self.store.lookup(key)[0] is not None and self._known_pass(run, key) is not None
                   for key in lookup_keys(run, commit, self.release))

    def _known_pass(self, run: Run, key: str) -> Optional[local.Passed]:
        """What the probe of the stored tree ``key`` answered with this interpreter as it is now (not under
        ``--verify``)."""
        fingerprint = None if run.settings.verify else interpreter_fingerprint(run)
        return self.store.passed(key, fingerprint, probe_modules(run.settings.require)) if fingerprint else None

    def _drop(self, run: Run, key: str, why: str) -> None:
        run.say(f"store: the tree {key[:12]} in {self.store.path} is damaged ({why}); it is not linked, and is "
                "removed from the store; fetching or building instead")
        with self.store.locked(exclusive=True):
            self.store.remove(key)

    def _link(self, run: Run, manifest: CacheEntry) -> Optional[str]:
        root = run.settings.root
        packages = layout.packages_dir(root)
        stamp_key = {"store": manifest.key, "commit": manifest.fields.get("commit")}
        linker = local.Linker()
        with self.store.locked(exclusive=False):
            try:
                self.store.check(manifest, full=run.settings.verify)
            except CacheCorrupt as exc:
                problem: Optional[str] = str(exc)
            else:
                problem = None
                build_dir = prepare_build_dir(run, stamp_key)
                run.stamps.begin("build", stamp_key)
                local.release(root)
                os.makedirs(build_dir, exist_ok=True)
                remove_tree(packages)
                staging = layout.store_linking_dir(root)
                remove_tree(staging)
                with recording(build_dir, layout.build_made_record(root)):  # clean removes only what it made
                    self.store.link(manifest, staging, linker)
                    rename_into_place(staging, packages)
                run.stamps.finish("build", stamp_key)
                mode = linker.mode or local.HARDLINK
                self.store.hold(root, manifest.key, mode)  # before prune may look
        if problem is not None:
            self._drop(run, manifest.key, problem)
            return None
        run.worked()
        run.say(f"store: linked the {manifest.how} tree {manifest.key[:12]} ({manifest.files} files, "
                f"{manifest.size >> 20} MB) into {packages} by {mode}")
        say_cross_device(run, self.store, linker)
        return mode

    def _verified(self, run: Run, commit: str, manifest: CacheEntry, mode: str) -> Optional[Decision]:
        how = How(manifest.how)
        known = self._known_pass(run, manifest.key)
        if known is not None:
            decision = decision_from_pass(run, commit, how, known)
            if decision is not None:
                run.say(f"store: not probed again: this tree passed the full probe with {run.interpreter.executable} "
                        "as it is now (--verify probes)")
                decision.link_mode = mode
                return decision
        with run.step(Stage.VERIFY):
            decision = verify_tree(run, commit, how, self.early)
        remember_pass(run, self.store, manifest.key, decision)
        decision.link_mode = mode
        return decision


def decision_from_pass(run: Run, commit: str, how: How, known: local.Passed) -> Optional[Decision]:
    """The answer a probe gave this tree in another root, for this root; None when it fails the gate now."""
    settings = run.settings
    prefix = layout.tree_folders(settings.root)
    modules = tuple(ModuleResult(name, os.path.join(settings.root, rel), None) for name, rel in known.files.items())
    probe = Probe(interpreter=run.interpreter, modules=modules, version=known.version, version_error=None,
                  pythonpath=joined_pythonpath(prefix, run.environ.get("PYTHONPATH")), seconds=0.0)
    verdict = evaluate(probe, settings.min_version, settings.require)
    if not verdict.reusable:
        return None
    return Decision(ok=True, reason=verdict.reason, how=how, tree=settings.root, prepend=prefix, probe=probe,
                    verdict=verdict, commit=commit)


def remember_pass(run: Run, store: local.HostStore, key: str, decision: Decision) -> None:
    """Record that the tree ``key`` passed the full probe with the run's interpreter, its files relative to the
    root (another root takes the answer)."""
    fingerprint = interpreter_fingerprint(run)
    root = run.settings.root
    files = decision.verdict.files if decision.verdict is not None else {}
    if fingerprint is None or decision.probe is None or decision.probe.version is None or not files \
            or not all(is_within(f, root) for f in files.values()):
        return
    relative = {name: os.path.relpath(f, root) for name, f in files.items()}
    try:
        with store.locked(exclusive=True):
            store.remember(key, fingerprint, decision.probe.version, relative)
    except OSError as exc:
        run.say(f"store: could not record the probe of {key[:12]} ({exc}); another root probes it again")


def say_cross_device(run: Run, store: local.HostStore, linker: local.Linker) -> None:
    if linker.cross_device:
        run.say(f"store: {store.path} is on another file system than {run.settings.root}: its files are copied "
                "(put FLYDSL_STORE on the roots' file system to link them)")


def keep_in_store(run: Run, store: local.HostStore, commit: str, decision: Decision, release: Optional[str]) -> None:
    """Add a tree another way installed and verified to the store (a hardlink makes the root's files the store's),
    held for the root; a failure to keep it never fails the run."""
    root = run.settings.root
    packages = layout.packages_dir(root)
    kept = (How.RELEASED, How.BUILT, How.CACHED)
    if decision.how not in kept or decision.link_mode is not None or not os.path.isdir(packages):
        return
    try:
        members, holding = hashed_members(packages, os.fsencode(root.rstrip("/") + "/"))
        specific = root if holding else None
        if holding:
            run.say(f"store: the tree holds its root's path ({', '.join(holding[:3])}"
                    f"{', ...' if len(holding) > 3 else ''}): it is kept for {root} alone")
        fields = store_fields(run, commit, release if decision.how is How.RELEASED else None, specific)
        linker = local.Linker()
        manifest, added = store.put(cache_key("tree", fields), fields, packages, members, how=str(decision.how),
                                    linker=linker)
        key = manifest.key
    except (OSError, CacheCorrupt) as exc:
        run.say(f"store: the tree was not kept in {store.path} ({exc}); the root's own tree is used")
        return
    if not added:  # another root added the same tree meanwhile: this root's files stay its own
        store.hold(root, key, local.COPY)
        run.say(f"store: the tree {key[:12]} was already in {store.path}; the root keeps its own copy")
        return
    mode = linker.mode or local.HARDLINK
    store.hold(root, key, mode)
    remember_pass(run, store, key, decision)
    decision.link_mode = mode
    run.say(f"store: kept the tree {key[:12]} ({manifest.files} files, {manifest.size >> 20} MB) in "
            f"{store.path} by {mode}; other roots link it from there")
    say_cross_device(run, store, linker)


def linked_tree_problem(run: Run) -> Optional[str]:
    """Why the root's tree is no longer the stored tree it was linked from, or None; read-only.  A hardlinked
    file is checked against the store's seal (hashed when its stat differs); under ``--verify`` every file is."""
    root, verify = run.settings.root, run.settings.verify
    record = local.root_record(root)
    if record is None or not (verify or record[2] == local.HARDLINK):
        return None
    store = local.HostStore(record[0])
    manifest, _ = store.lookup(record[1])
    if manifest is None:
        return None  # pruned, or damaged: the root's tree is its own now, probed as any other
    packages = layout.packages_dir(root)
    try:
        store.check(manifest, full=verify, at=packages, sealed=record[2] == local.HARDLINK)
    except CacheCorrupt as exc:
        return f"{exc} in {packages}, linked from the store's tree {manifest.key[:12]} by {record[2]}"
    return None


def repair_linked_tree(run: Run, problem: str) -> None:
    """Under the lock: the root's damaged tree goes (the stored one too when its files were the root's, by
    hardlink), so the run provisions it again."""
    root = run.settings.root
    record = local.root_record(root)
    if record is not None and record[2] == local.HARDLINK:
        store = local.HostStore(record[0])
        with store.locked(exclusive=True):
            manifest, _ = store.lookup(record[1])
            try:
                if manifest is not None:
                    store.check(manifest)  # the store's own files: the root's were they still hardlinks
            except CacheCorrupt as exc:
                store.remove(record[1])
                run.say(f"store: removed the tree {record[1][:12]} from {record[0]}: {exc} (its files were the "
                        "root's, by hardlink)")
    local.release(root)
    run.stamps.undo("tree")
    run.stamps.undo("build")
    remove_tree(layout.packages_dir(root))
    run.say(f"store: {problem}; the root's tree is removed and provisioned again")
