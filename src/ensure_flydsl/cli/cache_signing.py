"""``ensure-flydsl cache keygen|sign`` and the signers ``cache list`` shows (binary_cache/signing.py).

- ``cache keygen --out DIR NAME``: ``DIR/NAME.secret`` (created with mode 600, never readable by others
  even for an instant; an existing file is never replaced) and ``DIR/NAME.pub`` (``NAME:BASE64``).
- ``cache sign --key PATH [KEY...]``: adds the key's signature to the entries named (by a prefix of their
  key, as ``cache list`` shows it: every manifest of that key, the first and the variants) or to all; the
  manifests are not touched, nothing is rebuilt.  With
  trusted keys set, only entries one of them already vouches for are signed (a rotation re-signs what the
  old key signed, never what anybody dropped into the store); without, every entry named, and the
  command says so.
"""

from __future__ import annotations

import os
from typing import AbstractSet, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ensure_flydsl.settings import Settings
from ensure_flydsl.support.keys import KEY_NAME, NAME_ALLOWED, KeyProblem, PublicKey, read_secret_key
from ensure_flydsl.trees.remote import Cache, CacheEntry
from ensure_flydsl.trees.signing import (
    MissingLibrary,
    check_entry,
    check_secret,
    generate,
    manifest_sha,
    signature_path,
    trusted_keys,
    write_signature,
)


class Refused(Exception):
    """Bad input to a signing command: one line, exit 64."""


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
        secret_line, public_line = generate(name)
    except MissingLibrary as exc:
        raise Refused(f"cache keygen: {exc}") from None
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        # O_EXCL with mode 600 from the start: the secret is never, even briefly, readable by others, and a
        # file (or a symlink) put there meanwhile is not written through.
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise Refused(f"cache keygen: cannot create {secret}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, (secret_line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(public_line + "\n")
    except OSError as exc:
        os.unlink(secret)  # ours, made a moment ago: no half pair is left
        raise Refused(f"cache keygen: cannot create {public}: {exc.strerror or exc}") from None
    return secret, public


def sign_entries(settings: Settings, cache: Cache, key_path: str, names: Sequence[str],
                 say: Callable[[str], None]) -> int:
    """Add the signature of the key in ``key_path`` to the entries named (all when none is); 0."""

    try:
        secret = read_secret_key(os.path.abspath(key_path))
        check_secret(secret)
    except (KeyProblem, MissingLibrary) as exc:
        raise Refused(f"cache sign --key={key_path!r} is not allowed: a secret key file written by "
                      f"`ensure-flydsl cache keygen` (mode 600); {exc}") from None
    entries = [e for e in cache.entries() if e.kind != "orphan"]
    chosen = _chosen(entries, names)
    live = live_versions(entries)
    trusted = trusted_keys(settings.cache_trusted_keys) if settings.cache_trusted_keys else []
    if not trusted:
        say(f"cache sign: no trusted keys are set ({settings.label('cache_trusted_keys')}), so every entry named "
            "is signed as it is: sign only a cache that nobody else writes to")
    signed = already = skipped = 0
    for entry in chosen:
        label = f"{entry.kind} {entry.key[:12]}" + (f" from {entry.variant}" if entry.variant else "")
        problems: List[str] = []
        verdict = check_entry(cache.store, entry, trusted, problems, live[(entry.kind, entry.key)]) if trusted else None
        for problem in problems:
            say(f"warning: {problem}")
        if verdict is not None and not verdict.trusted:
            say(f"skipped {label}: it {verdict.problem}; only entries a trusted key signed are signed")
            skipped += 1
            continue
        rel = signature_path(entry.kind, entry.key, entry.manifest, secret.name)
        if cache.store.exists(rel):
            already += 1
            continue
        write_signature(cache.store, entry.kind, entry.key, entry.manifest, secret)
        say(f"signed {label} with {secret.name}")
        signed += 1
    say(f"{signed} signed with {secret.name}, {already} already signed by it, {skipped} skipped, in {cache.location}")
    return 0


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
                          "that `ensure-flydsl cache list` shows")
        chosen += [e for e in found if not any(e is c for c in chosen)]
    return chosen


def live_versions(entries: Sequence[CacheEntry]) -> Dict[Tuple[str, str], AbstractSet[str]]:
    """(kind, key): the sha256s of that key's manifests among ``entries`` (binary_cache/signing.py's ``live``)."""

    found: Dict[Tuple[str, str], Set[str]] = {}
    for entry in entries:
        found.setdefault((entry.kind, entry.key), set()).add(manifest_sha(entry.manifest))
    return dict(found)


def signers_of(settings: Settings, cache: Cache, entries: Sequence[CacheEntry],
               warnings: List[str]) -> Dict[str, List[Dict[str, object]]]:
    """For ``cache list``: each entry's signers, by the sha256 of its manifest, {"name", "trusted",
    "verifies"}; ``trusted`` is None without trusted keys (nothing is verified then), else whether the
    signature verifies under a trusted key; ``verifies`` is None for a name no trusted key has, else whether
    its signature matches the manifest."""

    trusted: List[PublicKey] = trusted_keys(settings.cache_trusted_keys) if settings.cache_trusted_keys else []
    found: Dict[str, List[Dict[str, object]]] = {}
    entries = [entry for entry in entries if entry.kind != "orphan"]
    live = live_versions(entries)
    for entry in entries:
        verdict = check_entry(cache.store, entry, trusted, warnings, live[(entry.kind, entry.key)])
        names = {public.name for public in trusted}
        found[manifest_sha(entry.manifest)] = [
            {"name": name, "trusted": (name in verdict.trusted_by) if trusted else None,
             "verifies": (name in verdict.trusted_by) if name in names else None} for name in verdict.signers]
    return found


def signers_text(signers: Optional[List[Dict[str, object]]]) -> str:
    if not signers:
        return "unsigned"
    shown = []
    for signer in signers:
        mark = {True: " (trusted)", False: " (not trusted)", None: ""}[signer["trusted"]]  # type: ignore[index]
        if signer.get("verifies") is False:
            mark = " (trusted key, but the signature does not match the manifest)"
        shown.append(f"{signer['name']}{mark}")
    return "signed by " + ", ".join(shown)
