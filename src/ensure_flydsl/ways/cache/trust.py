"""Signed cache entries in a run: with FLYDSL_CACHE_TRUSTED_KEYS set, a tree or MLIR entry is installed
only when one of those keys signed its manifest's exact bytes (binary_cache/signing.py); with
FLYDSL_CACHE_SIGNING_KEY set, what the run publishes is signed.  A key may hold several manifests (the
first one published, and signers' variants: binary_cache/variants.py): the run takes the first one it
trusts.  A refused entry is reported in one line, once per run, and built around: never installed, never
deleted (it is not this host's to remove)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from ensure_flydsl.support.keys import KeyProblem, SecretKey, read_secret_key
from ensure_flydsl.trees.remote import Cache, CacheEntry, CacheError
from ensure_flydsl.trees.signing import check_entry, check_secret, manifest_sha, trusted_keys
from ensure_flydsl.ways.context import Run


def say_once(run: Run, cache: Cache, line: str) -> None:
    """Say ``line`` unless the run said it about this cache already (a key is looked up again by the
    build lease's turn: the same refusal is news once)."""
    if line not in cache.said:
        cache.said.add(line)
        run.say(line)


def choose_entry(run: Run, cache: Cache, kind: str, key: str, what: str) -> Tuple[Optional[CacheEntry], bool]:
    """The entry of ``kind``/``key`` the run may install, and whether the cache holds any manifest for the
    key (False: a miss).  Without trusted keys: the first manifest, else the newest variant.  With them: the
    first one a trusted key signed, the first manifest before the variants; each refusal said in one line.
    ``what`` names the key's entries: "tree entry for a35627a2", "MLIR entry for LLVM 0123456789ab".
    CacheError when the cache cannot be read."""
    primary = cache.lookup(kind, key)
    if not run.settings.cache_trusted_keys:
        if primary is not None:
            return primary, True
        variants = sorted(cache.variants(kind, key), key=lambda e: e.created, reverse=True)
        return (variants[0] if variants else None), bool(variants)
    try:
        return _trusted_entry(run, cache, kind, key, what, primary)
    except CacheError as exc:  # MissingLibrary too: no entry can be shown to be trusted
        say_once(run, cache, f"cache: the signatures of the cache's {what} cannot be checked ({exc}); not installed, "
                 "building instead")
        return None, True


def _trusted_entry(run: Run, cache: Cache, kind: str, key: str, what: str,
                   primary: Optional[CacheEntry]) -> Tuple[Optional[CacheEntry], bool]:
    trusted = trusted_keys(run.settings.cache_trusted_keys)
    problems: List[str] = []
    if primary is not None:
        verdict = check_entry(cache.store, primary, trusted, problems)
        if verdict.trusted:
            return _take(run, cache, primary, what, verdict.trusted_by, problems), True
        problems.clear()  # judged again below, with the variants' manifests known
    current = ([primary] if primary is not None else []) + cache.variants(kind, key, [p.name for p in trusted])
    live = {manifest_sha(entry.manifest) for entry in current}
    refused: List[str] = []
    for entry in current:
        verdict = check_entry(cache.store, entry, trusted, problems, live)
        if verdict.trusted:
            return _take(run, cache, entry, what, verdict.trusted_by, problems), True
        refused.append(f"cache: the cache's {_label(entry, what)} {verdict.problem}; not installed")
    for problem in problems:
        say_once(run, cache, f"cache: {problem}")
    for n, line in enumerate(refused, 1):
        say_once(run, cache, line + (", building instead" if n == len(refused) else ""))
    return None, bool(current)


def _take(run: Run, cache: Cache, entry: CacheEntry, what: str, by: Tuple[str, ...], problems: List[str]) -> CacheEntry:
    for problem in problems:
        say_once(run, cache, f"cache: {problem}")
    say_once(run, cache, f"cache: the cache's {_label(entry, what)} is signed by {', '.join(by)}, which "
             f"{settings_label(run)} trusts")
    return entry


def _label(entry: CacheEntry, what: str) -> str:
    """"tree entry for a35627a2", or for a variant "tree entry for a35627a2 from k1"."""
    return f"{what} from {entry.variant}" if entry.variant else what


def settings_label(run: Run) -> str:
    return run.settings.label("cache_trusted_keys")


def signers(run: Run) -> List[SecretKey]:
    """The key this run signs what it publishes with (none without FLYDSL_CACHE_SIGNING_KEY).  Read again
    here (the settings checked it): CacheError, so the publish is skipped, when it went bad since."""
    path = run.settings.cache_signing_key
    if path is None:
        return []

    try:
        secret = read_secret_key(path)
        check_secret(secret)
    except KeyProblem as exc:
        raise CacheError(f"{run.settings.label('cache_signing_key')}: {exc}") from None
    return [secret]


def publish_note(run: Run, secrets: List[SecretKey]) -> str:
    """What follows "published the tree ... to LOCATION": who signed it, or why checking hosts refuse it."""
    if secrets:
        return ", signed by " + ", ".join(secret.name for secret in secrets)
    if run.settings.cache_trusted_keys:
        return (f", unsigned: {settings_label(run)} is set but {run.settings.label('cache_signing_key')} is not, "
                "so hosts that check signatures will not install it")
    return ""
