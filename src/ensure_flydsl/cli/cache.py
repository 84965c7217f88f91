"""``cache list|prune|keygen|sign`` and ``store list|prune``: a cache or store that cannot be used is bad input here
(exit 64), where a build would merely go on without it."""

from __future__ import annotations

import json
import os
import time
from typing import Callable, Dict, List, Sequence, Tuple

from ensure_flydsl.cli import Call
from ensure_flydsl.errors import EnsureError, ExitCode, Refused, Stage
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.files import LockBusy
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.report import printable
from ensure_flydsl.support.space import parse_size, size_text
from ensure_flydsl.trees import signing
from ensure_flydsl.trees.backends import CacheError
from ensure_flydsl.trees.local import HostStore, store_problem
from ensure_flydsl.trees.manifest import CacheEntry
from ensure_flydsl.trees.remote import Cache, open_cache
from ensure_flydsl.trees.signing import KEY_NAME, NAME_ALLOWED, KeyProblem, read_secret_key

LIST_SCHEMA_VERSION = 1  # `cache list --json`'s shape (docs/schema/cache_list.schema.json): a new key keeps it
SUMMARY_FIELDS = ("commit", "llvm_commit", "abi", "platform")  # shown first in `cache list`, when an entry has them
SUMMARY_MAX = 4
SIZE_ALLOWED = "bytes, or a number with K, M, G or T (powers of 1024; e.g. 500M, 2G, 1.5T)"


def housekeeping(call: Call, settings: Settings) -> int:
    """``cache ACTION`` and ``store ACTION``."""
    group, args, say = call.args.command, call.args, call.reporter.say
    action = getattr(args, f"{group}_action")
    if action is None:
        raise Refused("which one? " + ("list, prune, keygen or sign" if group == "cache" else "list or prune") +
                      f" ({command('help ' + group)} says what each does)", f"ensure-flydsl {group}")
    if action == "keygen":
        if args.out is None or len(args.names) != 1:
            raise Refused("cache keygen needs --out DIR and one NAME (e.g. cache keygen --out ~/.config/flydsl ci-1)")
        secret, public = keygen(args.out, args.names[0])
        say(f"wrote the secret key {secret} (mode 600: give it to the host that signs, as FLYDSL_CACHE_SIGNING_KEY) "
            f"and the public key {public} (give it to every host that checks, in FLYDSL_CACHE_TRUSTED_KEYS)")
        return 0
    where = settings.cache if group == "cache" else settings.store_folder(call.environ)
    if where is None:
        raise Refused("FLYDSL_CACHE (--cache) is not set: point it at a folder or an fsspec URL such as "
                      "s3://bucket/prefix" if group == "cache" else
                      "no host store: FLYDSL_STORE is off (or neither XDG_CACHE_HOME nor HOME names a folder)")
    if action == "prune" and args.max_size is None:
        raise Refused(f"{group} prune needs --max-size SIZE: {SIZE_ALLOWED}")
    try:
        limit = parse_size(args.max_size) if action == "prune" else 0
    except ValueError:
        raise Refused(f"--max-size={args.max_size!r} is not allowed: {SIZE_ALLOWED}") from None
    if group == "store":
        return store_command(call, settings, action, where, limit)
    if action == "sign" and args.key is None:
        raise Refused("cache sign needs --key PATH: the secret key file to sign with (from cache keygen)")
    try:
        cache = open_cache(where)
        if action == "sign":
            sign_entries(settings, cache, args.key, args.names, say)
            _warn(cache.warnings, say)
        elif action == "list":
            _list(call, settings, cache)
        else:
            removed = cache.prune(limit)
            _warn(cache.warnings, say)
            for entry in removed:
                say(f"removed {describe(entry)}")
            kept = cache.entries()
            total = sum({e.blob: e.size for e in kept}.values())
            say(f"{len(removed)} removed; {cache.location} now holds {len(kept)} entries, {size_text(total)} "
                f"(limit {size_text(limit)})")
    except CacheError as exc:
        raise Refused(str(exc)) from None
    return 0


def _list(call: Call, settings: Settings, cache: Cache) -> None:
    entries = cache.entries()
    signers = signers_of(settings, cache, entries, cache.warnings)
    _warn(cache.warnings, call.reporter.say)
    if call.as_json:  # one object, also for an empty cache
        listed = [dict(entry.to_json(), signers=names) for entry, names in zip(entries, signers)]
        print(json.dumps({"schema_version": LIST_SCHEMA_VERSION, "location": cache.location, "entries": listed,
                          "warnings": list(cache.warnings)}, sort_keys=True))
        return
    if not entries:
        call.reporter.say(f"no entries in {cache.location}")
    for entry, names in zip(entries, signers):
        variant = f"  from {entry.variant}" if entry.variant else ""
        print(f"{describe(entry)}{variant}  {signers_text(names)}")


def describe(entry: CacheEntry) -> str:
    """One line for an entry of either tier: kind, key, size, when, the fields that tell entries apart, any damage."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.used or entry.created))
    if entry.kind == "orphan":
        return printable(f"orphan  {entry.fields.get('path')}  {size_text(entry.size)}  {when}")
    line = f"{entry.kind:<5} {entry.key[:12]}  {size_text(entry.size):>10}  {when}  {summary(entry)}"
    if entry.how:
        line += f"  {entry.how}" + (f" (signed by {', '.join(entry.signers)})" if entry.signed_by else "")
    return printable(line + (f"  DAMAGED: {entry.problem}" if entry.problem else ""))


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
        say(printable(f"warning: {warning}"))


def keygen(out_dir: str, name: str) -> Tuple[str, str]:
    """Write a new key pair into ``out_dir``; (secret path, public path)."""
    if not KEY_NAME.match(name):
        raise Refused(f"cache keygen NAME={name!r} is not allowed: {NAME_ALLOWED}")
    folder = os.path.abspath(out_dir)
    secret, public = os.path.join(folder, name + ".secret"), os.path.join(folder, name + ".pub")
    for path in (secret, public):
        if os.path.lexists(path):
            raise Refused(f"cache keygen: {path} exists; it is never replaced (a key in use would be lost): "
                          "choose another NAME or --out folder")
    try:
        secret_line, public_line = signing.generate(name)
    except signing.MissingLibrary as exc:
        raise Refused(f"cache keygen: {exc}") from None
    # O_EXCL with the mode from the start: the secret is never readable by others, even briefly.
    for path, line, mode in ((secret, secret_line, 0o600), (public, public_line, 0o644)):
        try:
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        except OSError as exc:
            if path == public:
                os.unlink(secret)  # ours, made a moment ago: no half pair is left
            raise Refused(f"cache keygen: cannot create {exc.filename or path}: {exc.strerror or exc}") from None
        with os.fdopen(fd, "w") as handle:
            if path == secret:
                os.fchmod(fd, mode)  # whatever the umask
            handle.write(line + "\n")
            handle.flush()
            os.fsync(fd)
    return secret, public


def sign_entries(settings: Settings, cache: Cache, key_path: str, names: Sequence[str],
                 say: Callable[[str], None]) -> None:
    """Sign the entries named (default all); with trusted keys, only those a trusted key signed (none dropped in)."""
    try:
        secret = read_secret_key(os.path.abspath(key_path))
        signing.check_secret(secret)
    except (KeyProblem, signing.MissingLibrary) as exc:
        raise Refused(f"cache sign --key={key_path!r} is not allowed: a secret key file written by "
                      f"`{command('cache keygen')}` (mode 600); {exc}") from None
    entries = [e for e in cache.entries() if e.kind != "orphan"]
    chosen = _chosen(entries, names)
    live = signing.live_versions(entries)
    trusted = signing.trusted_keys(settings.cache_trusted_keys)
    if not trusted:
        say(f"cache sign: no trusted keys are set ({settings.label('cache_trusted_keys')}), so every entry named "
            "is signed as it is: sign only a cache that nobody else writes to")
    signed = already = skipped = 0
    for entry in chosen:
        label = f"{entry.kind} {entry.key[:12]}" + (f" from {entry.variant}" if entry.variant else "")
        problems: List[str] = []
        verdict = signing.check_entry(cache.store, entry, trusted, problems, live[(entry.kind, entry.key)]) \
            if trusted else None
        _warn(problems, say)
        if verdict is not None and not verdict.trusted:
            say(f"skipped {label}: it {verdict.problem}; only entries a trusted key signed are signed")
            skipped += 1
            continue
        rel = signing.signature_path(entry.kind, entry.key, entry.manifest, secret.name)
        if cache.store.exists(rel):
            already += 1
            continue
        signing.write_signature(cache.store, entry.kind, entry.key, entry.manifest, secret)
        say(f"signed {label} with {secret.name}")
        signed += 1
    say(f"{signed} signed with {secret.name}, {already} already signed by it, {skipped} skipped, in {cache.location}")


def _chosen(entries: List[CacheEntry], names: Sequence[str]) -> List[CacheEntry]:
    """The entries of the keys named by prefixes (each must name one key: all of its manifests are chosen)."""
    if not names:
        return entries
    chosen: List[CacheEntry] = []
    for name in names:
        found = [e for e in entries if e.key.startswith(name.lower())] if name else []
        keys = {(e.kind, e.key) for e in found}
        if len(keys) != 1:
            why = "no entry's key starts with it" if not keys else f"{len(keys)} entries' keys start with it"
            raise Refused(f"cache sign: {name!r} names no single entry ({why}); give a longer prefix of a key "
                          f"that `{command('cache list')}` shows")
        chosen += [e for e in found if not any(e is c for c in chosen)]
    return chosen


def signers_of(settings: Settings, cache: Cache, entries: Sequence[CacheEntry],
               warnings: List[str]) -> List[List[Dict[str, object]]]:
    """Each entry's signers: {"name", "trusted" (None without trusted keys), "verifies" (None: no trusted key's)}."""
    trusted = signing.trusted_keys(settings.cache_trusted_keys)
    live = signing.live_versions(entry for entry in entries if entry.kind != "orphan")
    names = {public.name for public in trusted}
    found: List[List[Dict[str, object]]] = []
    for entry in entries:
        verdict = None if entry.kind == "orphan" else signing.check_entry(cache.store, entry, trusted, warnings,
                                                                          live[(entry.kind, entry.key)])
        found.append([] if verdict is None else [
            {"name": name, "trusted": (name in verdict.trusted_by) if trusted else None,
             "verifies": (name in verdict.trusted_by) if name in names else None} for name in verdict.signers])
    return found


def signers_text(signers: List[Dict[str, object]]) -> str:
    if not signers:
        return "unsigned"
    shown = []
    for signer in signers:
        mark = {True: " (trusted)", False: " (not trusted)", None: ""}[signer["trusted"]]  # type: ignore[index]
        if signer.get("verifies") is False:
            mark = " (trusted key, but the signature does not match the manifest)"
        shown.append(f"{signer['name']}{mark}")
    return "signed by " + ", ".join(shown)


def store_command(call: Call, settings: Settings, action: str, path: str, limit: int) -> int:
    as_json, say = call.as_json, call.reporter.say
    problem = store_problem(path)
    if problem is not None:  # the rule `ensure` has for the store, in every command
        raise Refused(f"{settings.label('store') if settings.store else 'the default host store'}={path} cannot be "
                      f"used: {problem}")
    if not os.path.isdir(path):
        listed: Dict[str, object] = {"trees": []} if action == "list" else {"removed": []}
        print(result_json(result_object(ok=True, exit_code=0, reason="no tree", store=path, **listed))
              if as_json else f"the host store {path} holds no tree")
        return 0
    try:
        store = HostStore.open(path, lock_timeout=settings.lock_timeout, say=say)
        removed = store.prune(limit) if action == "prune" else []
        trees = store.entries()
    except LockBusy as exc:
        raise EnsureError(ExitCode.LOCK, str(exc), stage=Stage.LOCK, hint="an ensure-flydsl run is adding to the "
                          "store; try again when it is done, or raise FLYDSL_LOCK_TIMEOUT") from None
    except OSError as exc:
        raise Refused(f"the host store {path} cannot be used: {exc}") from None
    size = size_text(sum(t.size for t in trees))
    if action == "list" and as_json:
        print(result_json(result_object(ok=True, exit_code=0, reason=f"{len(trees)} trees", store=path,
                                        trees=[t.tree_json() for t in trees])))
    elif action == "list":
        print(printable(f"the host store {path}: {len(trees)} trees, {size}"))
        for tree in trees:
            print(describe(tree))
    else:
        _warn(store.warnings, say)
        for tree in removed:
            say(f"removed {describe(tree)}")
        held = printable(f"the host store {path} holds {size} (at most {size_text(limit)} asked)")
        if as_json:
            print(result_json(result_object(ok=True, exit_code=0, reason=held, store=path, left=store.warnings,
                                            removed=[t.tree_json() for t in removed])))
        else:
            say(held)
    return 0
