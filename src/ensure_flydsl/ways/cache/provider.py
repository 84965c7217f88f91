"""The binary cache way: a tree or MLIR install another host built, fetched hash by hash (signed, with trusted keys);
an accelerator: a miss, a store down, a corrupt or untrusted entry is said once and built around, never deleted."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import os
from typing import Dict, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import cached_mlir_dir, mlir_signers, packages_dir
from ensure_flydsl.result import How
from ensure_flydsl.source.git import CheckoutFiles
from ensure_flydsl.source.needs import pin_llvm_inputs
from ensure_flydsl.support import faults
from ensure_flydsl.support.files import atomic_write_json, file_sha256, read_json, remove_tree
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.space import size_text
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.trees import signing
from ensure_flydsl.trees.backends import CacheCorrupt, CacheError, CacheUnreachable
from ensure_flydsl.trees.manifest import CacheEntry, cache_key
from ensure_flydsl.trees.remote import Cache, open_cache
from ensure_flydsl.trees.signing import SecretKey, check_entry, manifest_sha, trusted_keys, untrusted
from ensure_flydsl.ways import Way
from ensure_flydsl.ways.base import Early, Provider, Shared
from ensure_flydsl.ways.checks import WRONG, Check, RunContext, Submit, passed, settled
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.tree import building, tree_identity, verify_tree


def llvm_label(key: Mapping[str, object]) -> str:
    commit = key.get("llvm_commit")
    return commit[:12] if isinstance(commit, str) else "(commit unknown)"


def open_run_cache(run: Run) -> Optional[Cache]:
    location = run.settings.cache
    if location is None:
        return None
    try:
        cache = open_cache(location)
    except CacheError as exc:  # the preflight checked it; it may have gone away since
        run.say(f"cache: {shown_location(location)} cannot be used now ({exc}); going on without it")
        return None
    if cache.down is not None:  # a store that connects when made (FTP, SFTP) and could not
        cache_failed(run, cache, CacheUnreachable(cache.down), "open")
        return None
    if cache.read_only:
        run.say(f"cache: {cache.location} is read-only for this user: entries are fetched from it, nothing is "
                "published to it and builds take no lease there (make it writable to share this host's builds)")
    return cache


def cache_failed(run: Run, cache: Cache, exc: Exception, what: str, then: str = "going on without it") -> None:
    """Say that ``what`` failed and what the run does ``then``; a cache that is down is said once per run."""
    if cache.down is None:
        run.say(f"cache: {what} ({exc}); {then}")
    else:
        say_once(run, cache, f"cache: {cache.location} cannot be used in this run: {cache.down}; building without "
                 "it, and this run does not try it again")


def usable(cache: Cache, *, writing: bool = False) -> bool:
    """Not once the cache is down for this run, nor for writes when it is read-only."""
    return cache.down is None and not (writing and cache.read_only)


def tree_fields(run: Run, commit: str) -> Optional[Dict[str, object]]:
    """A source build's cache fields, naming its MLIR before anything is built; None while its LLVM is unknown."""
    settings = run.settings
    mlir = ({"mlir_path": settings.mlir_path} if settings.mlir_path is not None else
            {"llvm": pin_llvm_inputs(CheckoutFiles(settings.root), run.environ).key(run.interpreter.abi)})
    if mlir == {"llvm": None}:
        return None
    build_script = file_sha256(os.path.join(settings.root, "scripts", "build.sh"))
    return {**tree_identity(run, commit), "build_script": build_script, "mlir": mlir}


def mlir_fields(run: Run, key: Mapping[str, object]) -> Dict[str, object]:
    return {**key, "platform": run.interpreter.platform}


def mlir_place(run: Run, key: Mapping[str, object]) -> Tuple[str, str]:
    """The cache key of an MLIR key, and the tool's own folder an install fetched for it goes to."""
    ckey = cache_key("mlir", mlir_fields(run, key))
    return ckey, os.path.join(cached_mlir_dir(run.settings.base_dir), ckey[:32])


def tree_from_cache(run: Run, cache: Cache, commit: str, early: Optional[Early] = None) -> Optional[Decision]:
    """The tree for this commit and interpreter, fetched and verified; None (said why) when there is none."""
    fields = tree_fields(run, commit)
    if fields is None:
        run.say("cache: not looked up: the pin's LLVM commit is unknown, so no entry can be known to match")
        return None
    key = cache_key("tree", fields)
    entry = _find(run, cache, "tree", key, f"tree entry for {commit[:8]}",
                  f"no tree for {commit[:12]} and {run.interpreter.abi}")
    if entry is None:
        return None
    run.plan(Plan.CACHE)
    run.worked()
    stamp_key = {"cache": key, "commit": commit}
    packages = packages_dir(run.settings.root)
    try:
        with building(run, stamp_key):
            make_room(packages)
            run.say(f"cache: fetching the tree {key[:12]} ({size_text(entry.size)}, {entry.files} files, "
                    f"built on {entry.host or 'another host'})")
            cache.get(entry, packages)
    except CacheCorrupt as exc:
        run.say(f"cache: the entry {key[:12]} is corrupt and was not installed ({exc.reason}); building instead")
        return None
    except CacheError as exc:
        cache_failed(run, cache, exc, f"fetching {key[:12]} failed", "building instead")
        return None
    faults.point("cache-fetched")
    run.facts.add_fetched("cache", entry.size)
    run.stamps.finish("build", stamp_key)
    try:
        decision = verify_tree(run, commit, How.CACHED, early)
        decision.signed_by = entry.signed_by  # kept with the tree in the host store: trust applies there too
        run.facts.looked_up("tree", hit=True)
        return decision
    except Exception as exc:  # an artifact that does not import here is not this host's answer
        run.stamps.undo("build")
        run.say(f"cache: the cached tree does not pass the probe here ({exc}); building instead")
        return None


def publish_tree(run: Run, cache: Cache, commit: str) -> None:
    """Share a verified source build (a failure to share never fails the run)."""
    fields = tree_fields(run, commit)
    if fields is None:
        run.say("cache: the tree is not published: it was built from an MLIR of an unknown LLVM commit")
        return
    _publish(run, cache, "tree", fields, packages_dir(run.settings.root))


def mlir_from_cache(run: Run, cache: Cache, key: Mapping[str, object]) -> Optional[str]:
    """An MLIR install for this LLVM key, fetched into the tool's own folder (again when the trusted keys now
    trust none of who signed the one fetched before), or None."""
    ckey, dest = mlir_place(run, key)
    signers = mlir_signers(dest)  # the trusted keys' lines (none without trusted keys or a record)
    if os.path.isdir(os.path.join(dest, "lib", "cmake", "mlir")):
        recorded = (read_json(signers) or {}).get("signed_by")
        lines = [line for line in recorded if isinstance(line, str)] if isinstance(recorded, list) else []
        refused = untrusted(lines, run.settings.cache_trusted_keys, run.settings.label("cache_trusted_keys"))
        if refused is None:
            run.say(f"cache: MLIR {ckey[:12]} was fetched before: {dest}")
            run.facts.looked_up("mlir", hit=True)
            return dest
        run.say(f"cache: MLIR {ckey[:12]} fetched before into {dest} is not used: {refused}")
    entry = _find(run, cache, "mlir", ckey, f"MLIR entry for LLVM {llvm_label(key)}",
                  f"no MLIR for LLVM {llvm_label(key)}")
    if entry is None:
        return None
    make_room(dest)
    run.worked()
    run.say(f"cache: fetching MLIR {ckey[:12]} ({size_text(entry.size)}); the LLVM build is skipped")
    try:  # the record first: an install is never there without it (read as downloaded by FLYDSL_MLIR_URL)
        atomic_write_json(signers, {"signed_by": list(entry.signed_by)})
        cache.get(entry, dest)
    except (CacheError, OSError) as exc:
        cache_failed(run, cache, exc, f"MLIR {ckey[:12]} could not be used", "building LLVM instead")
        return None
    run.facts.add_fetched("cache", entry.size)
    run.facts.looked_up("mlir", hit=True)
    return dest


def publish_mlir(run: Run, cache: Cache, key: Mapping[str, object], install: str) -> None:
    _publish(run, cache, "mlir", mlir_fields(run, key), install)


def _find(run: Run, cache: Cache, kind: str, key: str, what: str, missing: str) -> Optional[CacheEntry]:
    """The entry to install, or None (a miss said as ``missing``); a hit is counted once it is fetched."""
    if not usable(cache):
        return None
    try:
        entry, present = choose_entry(run, cache, kind, key, what)
    except CacheError as exc:
        cache_failed(run, cache, exc, f"cannot look into {cache.location}")
        entry, present = None, False
    finally:
        for warning in cache.warnings:
            say_once(run, cache, f"cache: {warning}")
        cache.warnings.clear()
    run.facts.looked_up(kind, hit=False)
    if entry is None and not present and usable(cache):  # (a cache that just went down was said to be down)
        run.say(f"cache: {missing} in {cache.location}")
    return entry


def _publish(run: Run, cache: Cache, kind: str, fields: Mapping[str, object], source: str) -> None:
    if not usable(cache, writing=True):
        return  # said once already (read-only, or down)
    key, label = cache_key(kind, fields), run.settings.label
    secrets: List[SecretKey] = []
    try:
        if run.settings.cache_signing_key is not None:  # read again: a key gone bad since skips the publish
            try:
                secrets = [signing.read_secret_key(run.settings.cache_signing_key)]
                signing.check_secret(secrets[0])
            except signing.KeyProblem as exc:
                raise CacheError(f"{label('cache_signing_key')}: {exc}") from None
        published = cache.put(kind, key, fields, source, secrets)
    except (CacheError, OSError) as exc:
        cache_failed(run, cache, exc, f"could not publish the {kind} {key[:12]} to {cache.location}", "the run goes on")
        return
    faults.point("cache-published")
    if not published.written:
        hint = "" if secrets else (f"; sign this host's builds ({label('cache_signing_key')}) to "
                                   "publish an entry of its own beside it")
        run.say(f"cache: the {kind} {key[:12]} is not published to {cache.location}: {published.why}{hint}")
        return
    note = f" ({published.note})" if published.note else ""
    if secrets:  # who signed it, or why checking hosts refuse it
        note += ", signed by " + ", ".join(secret.name for secret in secrets)
    elif run.settings.cache_trusted_keys:
        note += (f", unsigned: {label('cache_trusted_keys')} is set but {label('cache_signing_key')} is not, so "
                 "hosts that check signatures will not install it")
    run.say(f"cache: published the {kind} {key[:12]} ({size_text(published.entry.size)}) to {cache.location}{note}")


def make_room(dest: str) -> None:
    """``dest``'s folder made, ``dest`` and the temporary folders of fetches killed half-way beside it removed."""
    folder = os.path.dirname(dest)
    os.makedirs(folder, exist_ok=True)
    remove_tree(dest)
    for leftover in glob.glob(os.path.join(folder, ".*.fetch-*")):
        remove_tree(leftover)


@dataclasses.dataclass
class CacheProvider(Provider):
    """The tree another host built for this commit, interpreter ABI and platform, checked hash by hash."""

    way = Way.CACHE
    route = Plan.CACHE
    cache: Cache
    early: Early

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> Optional[CacheProvider]:
        return None if shared.cache is None else cls(shared.cache, shared.early)

    @staticmethod
    def predict(ctx: RunContext, checkout: Optional[str], submit: Submit) -> List[concurrent.futures.Future[Check]]:
        """Whose entries a shared cache installs: a warning (never blocking) unless trusted keys are set."""
        settings = ctx.settings
        if settings.cache is None:
            return []
        trusted = settings.label("cache_trusted_keys")
        if settings.cache_trusted_keys:
            names = ", ".join(line.partition(":")[0] for line in settings.cache_trusted_keys)
            signs = ("; this host signs what it publishes" if settings.cache_signing_key else
                     f"; this host publishes unsigned ({settings.label('cache_signing_key')} is not set), and hosts "
                     "that check signatures will not install what it publishes")
            return [settled(passed("cache-trust", f"cache entries are installed only when signed by {names}{signs}",
                                   Stage.SETTINGS))]
        return [settled(Check(
            "cache-trust", WRONG,
            f"{trusted} is not set: if other hosts or users can write to {shown_location(settings.cache)}, "
            "this host installs whatever they put there (the hashes only prove the blob matches its manifest, "
            "not who wrote it)",
            f"sign on the host that builds (FLYDSL_CACHE_SIGNING_KEY, from `{command('cache keygen')}`) "
            f"and set {trusted} to its .pub file on every host; ignore this if the cache is this host's alone",
            blocking=False, stage=Stage.SETTINGS))]

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        with run.step(Stage.CACHE):
            return tree_from_cache(run, self.cache, commit, self.early)


def say_once(run: Run, cache: Cache, line: str) -> None:
    """Said once per cache (the lease's turn looks a key up again)."""
    if line not in cache.said:
        cache.said.add(line)
        run.say(line)


def choose_entry(run: Run, cache: Cache, kind: str, key: str, what: str) -> Tuple[Optional[CacheEntry], bool]:
    """The entry the run may install, and whether the key has any manifest: without trusted keys the first
    manifest, else the newest variant; with them the first a trusted key signed, each refusal said."""
    primary = cache.lookup(kind, key)
    if not run.settings.cache_trusted_keys:  # nothing checked, so nothing known signed (whatever signed_by it holds)
        found = primary or max(cache.variants(kind, key), key=lambda e: e.created, default=None)
        return (None, False) if found is None else (dataclasses.replace(found, signed_by=()), True)
    try:
        trusted = trusted_keys(run.settings.cache_trusted_keys)
        problems: List[str] = []
        refused: List[str] = []
        entry, verdict = primary, None if primary is None else check_entry(cache.store, primary, trusted, problems)
        if verdict is None or not verdict.trusted:
            problems.clear()  # judged again below, with the variants' manifests known
            current = ([primary] if primary is not None else []) + cache.variants(kind, key, [p.name for p in trusted])
            live = {manifest_sha(each.manifest) for each in current}
            for entry in current:
                verdict = check_entry(cache.store, entry, trusted, problems, live)
                if verdict.trusted:
                    break
                refused.append(f"cache: the cache's {_label(entry, what)} {verdict.problem}; not installed")
        for problem in problems:
            say_once(run, cache, f"cache: {problem}")
        if entry is None or verdict is None or not verdict.trusted:
            for n, line in enumerate(refused, 1):
                say_once(run, cache, line + (", building instead" if n == len(refused) else ""))
            return None, bool(refused)
        say_once(run, cache, f"cache: the cache's {_label(entry, what)} is signed by {', '.join(verdict.trusted_by)}, "
                 f"which {run.settings.label('cache_trusted_keys')} trusts")
        return dataclasses.replace(entry, signed_by=verdict.keys), True  # the lines of the keys that verify
    except CacheError as exc:  # MissingLibrary too: no entry can be shown to be trusted
        say_once(run, cache, f"cache: the signatures of the cache's {what} cannot be checked ({exc}); not installed, "
                 "building instead")
        return None, True


def _label(entry: CacheEntry, what: str) -> str:
    """"tree entry for a35627a2", or for a variant "tree entry for a35627a2 from k1"."""
    return f"{what} from {entry.variant}" if entry.variant else what
