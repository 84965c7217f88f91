"""Signed cache entries in a run: with FLYDSL_CACHE_TRUSTED_KEYS set, a tree or MLIR entry is installed
only when one of those keys signed its manifest's exact bytes (binary_cache/signing.py); with
FLYDSL_CACHE_SIGNING_KEY set, what the run publishes is signed.  A refused entry is reported in one line
and built around: never installed, never deleted (it is not this host's to remove)."""

from __future__ import annotations

from typing import List

from ensure_flydsl.binary_cache.entries import Cache, CacheEntry, CacheError
from ensure_flydsl.pipeline.context import Run
from ensure_flydsl.support.keys import KeyProblem, SecretKey, read_secret_key


def entry_trusted(run: Run, cache: Cache, entry: CacheEntry, what: str) -> bool:
    """Whether the run may install ``entry`` (always, without trusted keys); the refusal said in one line.
    ``what`` names the entry: "tree entry for a35627a2", "MLIR entry for LLVM 0123456789ab"."""
    lines = run.settings.cache_trusted_keys
    if not lines:
        return True
    from ensure_flydsl.binary_cache.signing import check_entry, trusted_keys

    problems: List[str] = []
    try:
        verdict = check_entry(cache.store, entry, trusted_keys(lines), problems)
    except CacheError as exc:  # MissingLibrary too: the entry cannot be shown to be trusted
        run.say(f"cache: the signatures of the cache's {what} cannot be checked ({exc}); not installed, "
                "building instead")
        return False
    for problem in problems:
        run.say(f"cache: {problem}")
    if verdict.trusted:
        run.say(f"cache: the cache's {what} is signed by {', '.join(verdict.trusted_by)}, which "
                f"{settings_label(run)} trusts")
        return True
    run.say(f"cache: the cache's {what} {verdict.problem}; not installed, building instead")
    return False


def settings_label(run: Run) -> str:
    return run.settings.label("cache_trusted_keys")


def signers(run: Run) -> List[SecretKey]:
    """The key this run signs what it publishes with (none without FLYDSL_CACHE_SIGNING_KEY).  Read again
    here (the settings checked it): CacheError, so the publish is skipped, when it went bad since."""
    path = run.settings.cache_signing_key
    if path is None:
        return []
    from ensure_flydsl.binary_cache.signing import check_secret

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
