"""``ensure-flydsl cache list|prune|keygen|sign``: look into the binary cache (FLYDSL_CACHE), keep it within a
size, and sign its entries (cli/cache_signing.py).

Housekeeping, not provisioning: an unusable cache (unset, bad location, missing extra, no access) is
bad input here (exit 64), where a build would merely go on without the cache.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from ensure_flydsl.cli.cache_signing import Refused, keygen, signers_text
from ensure_flydsl.errors import ExitCode
from ensure_flydsl.settings import Settings
from ensure_flydsl.trees.remote import CacheEntry, CacheError, format_size, open_cache, parse_size
from ensure_flydsl.trees.signing import manifest_sha

# The version of the shape of `cache list --json` (docs/schema/cache_list.schema.json): a new key does not
# change it, a changed meaning does.
LIST_SCHEMA_VERSION = 1
# Fields shown first in `cache list`, when an entry has them; the rest follow in name order.
SUMMARY_FIELDS = ("commit", "llvm_commit", "abi", "platform")
SUMMARY_MAX = 4


def cache_command(settings: Settings, action: str, *, max_size: Optional[str], as_json: bool,
                  say: Callable[[str], None], names: Sequence[str] = (), out: Optional[str] = None,
                  key: Optional[str] = None) -> int:
    try:
        if action == "keygen":
            return _keygen(names, out, say)
        if names and action != "sign":
            return _refuse(f"cache {action} takes no NAME ({' '.join(names)})")
        return _cache_command(settings, action, max_size=max_size, as_json=as_json, say=say, names=names,
                              key=key)
    except Refused as exc:
        return _refuse(str(exc))


def _keygen(names: Sequence[str], out: Optional[str], say: Callable[[str], None]) -> int:
    if out is None or len(names) != 1:
        return _refuse("cache keygen needs --out DIR and one NAME (e.g. cache keygen --out ~/.config/flydsl ci-1)")
    secret, public = keygen(out, names[0])
    say(f"wrote the secret key {secret} (mode 600: give it to the host that signs, as FLYDSL_CACHE_SIGNING_KEY) "
        f"and the public key {public} (give it to every host that checks, in FLYDSL_CACHE_TRUSTED_KEYS)")
    return 0


def _cache_command(settings: Settings, action: str, *, max_size: Optional[str], as_json: bool,
                   say: Callable[[str], None], names: Sequence[str], key: Optional[str]) -> int:
    if settings.cache is None:
        return _refuse("FLYDSL_CACHE (--cache) is not set: point it at a folder or an fsspec URL such as "
                       "s3://bucket/prefix")
    limit = None
    if action == "prune":
        if max_size is None:
            return _refuse("cache prune needs --max-size SIZE: bytes, or a number with K, M, G or T (e.g. 500M, 2G)")
        try:
            limit = parse_size(max_size)
        except ValueError:
            return _refuse(f"--max-size={max_size!r} is not allowed: bytes, or a number with K, M, G or T "
                           "(powers of 1024; e.g. 500M, 2G, 1.5T)")
    if action == "sign" and key is None:
        return _refuse("cache sign needs --key PATH: the secret key file to sign with (from cache keygen)")
    try:
        cache = open_cache(settings.cache)
        if action == "sign":
            from ensure_flydsl.cli.cache_signing import sign_entries

            assert key is not None
            code = sign_entries(settings, cache, key, names, say)
            _warn(cache.warnings, say)
            return code
        if action == "list":
            from ensure_flydsl.cli.cache_signing import signers_of

            entries = cache.entries()
            signers = signers_of(settings, cache, entries, cache.warnings)
            _warn(cache.warnings, say)
            if as_json:
                print(json.dumps(list_object(entries, cache.location, signers, cache.warnings), sort_keys=True))
                return 0
            return _list(entries, cache.location, say, signers)
        assert limit is not None
        removed = cache.prune(limit)
        _warn(cache.warnings, say)
        for entry in removed:
            say(f"removed {describe(entry)}")
        kept = cache.entries()
        total = sum({e.blob: e.size for e in kept}.values())
        say(f"{len(removed)} removed; {cache.location} now holds {len(kept)} entries, {format_size(total)} "
            f"(limit {format_size(limit)})")
        return 0
    except CacheError as exc:
        return _refuse(str(exc))


def list_object(entries: List[CacheEntry], location: str, signers: Mapping[str, List[Dict[str, object]]],
                warnings: List[str]) -> Dict[str, object]:
    """`cache list --json`: one object, also for an empty cache (a reader of JSON Lines got nothing at all
    then, and could not tell an empty cache from a command that printed nothing)."""

    listed = []
    for entry in entries:
        data = entry.to_json()
        data["signers"] = signers.get(manifest_sha(entry.manifest), [])
        listed.append(data)
    return {"schema_version": LIST_SCHEMA_VERSION, "location": location, "entries": listed,
            "warnings": list(warnings)}


def _list(entries: List[CacheEntry], location: str, say: Callable[[str], None],
          signers: Mapping[str, List[Dict[str, object]]]) -> int:
    if not entries:
        say(f"no entries in {location}")
        return 0
    for entry in entries:
        variant = f"  from {entry.variant}" if entry.variant else ""
        print(f"{describe(entry)}{variant}  {signers_text(signers.get(manifest_sha(entry.manifest)))}")
    return 0


def describe(entry: CacheEntry) -> str:
    """One line: kind, short key, size, created, and the fields a person tells entries apart by."""
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.created))
    if entry.kind == "orphan":
        return f"orphan  {entry.fields.get('path')}  {format_size(entry.size)}  {created}"
    return f"{entry.kind:<5} {entry.key[:12]}  {format_size(entry.size):>10}  {created}  {summary(entry)}"


def summary(entry: CacheEntry) -> str:
    names = [n for n in SUMMARY_FIELDS if n in entry.fields]
    names += sorted(n for n in entry.fields if n not in SUMMARY_FIELDS)
    parts = []
    for name in names[:SUMMARY_MAX]:
        value = entry.fields[name]
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        if len(text) == 40 and all(c in "0123456789abcdef" for c in text):
            text = text[:12]  # a commit
        elif len(text) > 40:
            text = text[:37] + "..."
        parts.append(f"{name}={text}")
    return " ".join(parts)


def _warn(warnings: List[str], say: Callable[[str], None]) -> None:
    for warning in warnings:
        say(f"warning: {warning}")


def _refuse(message: str) -> int:
    print(f"ensure-flydsl: {message}", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)
