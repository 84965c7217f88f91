"""Signed entries (as Nix signs a narinfo): an ed25519 signature of a manifest's exact bytes beside it, checked offline
against trusted keys (docs/fleet.md); keys are Nix's ``NAME:BASE64`` lines, and no message here shows key material."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import os
import re
import stat
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ensure_flydsl.support.launcher import extra_remedy
from ensure_flydsl.trees.backends import CacheError, Store, StoredFile
from ensure_flydsl.trees.manifest import CacheEntry, check_name

KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
NAME_ALLOWED = "a key name of letters, digits, '.', '_' and '-' (at most 64, not starting with '.', '_' or '-')"
PUBLIC_BYTES = 32  # a NAME.pub file's key (`nix-store --generate-binary-cache-key` writes the same)
SECRET_BYTES = 64  # a NAME.secret file's (mode 600): the seed, then the public key (Nix's layout)
SIGNATURE_BYTES = 64
KEY_FILE_MAX = 4096  # a key file is one short line; more is not a key file
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}\Z")
SIGNATURE_MAX = 512  # "NAME:" (at most 65 bytes) and 88 base64 characters: anything larger is not a signature
MAX_SIGNATURES = 64  # per version of a manifest: more is a store flooded on purpose


class KeyProblem(ValueError):
    """A key file or key line that cannot be used; the message names the file or the key, never its bytes."""


@dataclass(frozen=True)
class PublicKey:
    name: str
    key: bytes = field(repr=False)

    def line(self) -> str:
        return f"{self.name}:{base64.b64encode(self.key).decode()}"


@dataclass(frozen=True)
class SecretKey:
    name: str
    seed: bytes = field(repr=False)
    public: bytes = field(repr=False)


def split_line(text: str, what: str) -> Tuple[str, bytes]:
    """``NAME:BASE64`` into the name and the decoded bytes; KeyProblem naming ``what`` otherwise."""
    name, colon, encoded = text.strip().partition(":")
    if not colon or not KEY_NAME.match(name):
        raise KeyProblem(f"{what} is not NAME:BASE64 with {NAME_ALLOWED}")
    with contextlib.suppress(ValueError):  # binascii.Error is one
        if _BASE64.match(encoded):
            return name, base64.b64decode(encoded, validate=True)
    raise KeyProblem(f"{what} ({name}) is not NAME:BASE64: what follows the ':' is not base64")


def parse_public(text: str, what: str) -> PublicKey:
    name, key = split_line(text, what)
    if len(key) != PUBLIC_BYTES:
        extra = " (a secret key? trust the NAME.pub file, never the secret)" if len(key) == SECRET_BYTES else ""
        raise KeyProblem(f"{what} ({name}) holds {len(key)} bytes; an ed25519 public key has {PUBLIC_BYTES}{extra}")
    return PublicKey(name, key)


def parse_secret(text: str, what: str) -> SecretKey:
    name, key = split_line(text, what)
    if len(key) != SECRET_BYTES:
        extra = " (a public key? give the NAME.secret file)" if len(key) == PUBLIC_BYTES else ""
        raise KeyProblem(f"{what} ({name}) holds {len(key)} bytes; an ed25519 secret key file holds "
                         f"{SECRET_BYTES} (seed and public key, as `cache keygen` and Nix write it){extra}")
    return SecretKey(name, key[:32], key[32:])


def looks_inline(item: str) -> bool:
    """Whether a value is meant as a ``NAME:BASE64`` key rather than a file's path (then written ./name:x)."""
    name, colon, _encoded = item.partition(":")
    return bool(colon and KEY_NAME.match(name))


def withheld(item: str) -> str:
    """A value as messages may show it: a key's name only, never what follows it."""
    return item.partition(":")[0] + ":..." if looks_inline(item) else item


def read_key_file(path: str, *, secret: bool) -> List[str]:
    """The non-blank lines of a key file: a regular file (a FIFO is refused, not waited on) of at most KEY_FILE_MAX
    bytes.  A secret key's must be the owner's alone to read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise KeyProblem(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise KeyProblem(f"{path} is not a regular file")
        if secret and st.st_mode & 0o077:
            raise KeyProblem(f"{path} may be read by others (mode {stat.S_IMODE(st.st_mode):o}): a secret key must "
                             f"be the owner's alone; chmod 600 {path}")
        data = os.read(fd, KEY_FILE_MAX + 1)
    except OSError as exc:
        raise KeyProblem(f"{path} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > KEY_FILE_MAX:
        raise KeyProblem(f"{path} is larger than {KEY_FILE_MAX} bytes: not a key file")
    try:
        return [line for line in data.decode("ascii").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise KeyProblem(f"{path} is not a key file (not ASCII text)") from None


def read_secret_key(path: str) -> SecretKey:
    lines = read_key_file(path, secret=True)
    if len(lines) != 1:
        raise KeyProblem(f"{path} holds {len(lines)} lines; a secret key file holds one, NAME:BASE64")
    return parse_secret(lines[0], f"the secret key in {path}")


def read_public_keys(path: str) -> List[PublicKey]:
    """A ``.pub`` file: one ``NAME:BASE64`` line (several lines: several keys)."""
    lines = read_key_file(path, secret=False)
    if not lines:
        raise KeyProblem(f"{path} holds no key; a .pub file holds a line NAME:BASE64")
    return [parse_public(line, f"line {n} of {path}") for n, line in enumerate(lines, 1)]


class MissingLibrary(CacheError):
    """A key is in use and the cryptography package cannot be imported."""


def _ed25519() -> Any:
    try:
        return importlib.import_module("cryptography.hazmat.primitives.asymmetric.ed25519")
    except ImportError as exc:
        raise MissingLibrary(f"signed cache entries need the cryptography package, which cannot be imported "
                             f"({exc}): " + extra_remedy("signing", "unset the cache key settings")) from None


def generate(name: str) -> Tuple[str, str]:
    """A new key pair: the secret file's line and the public file's line."""
    if not KEY_NAME.match(name):
        raise KeyProblem(f"{name!r} is not a key name: letters, digits, '.', '_' and '-', at most 64")
    private = _ed25519().Ed25519PrivateKey.generate()
    raw = importlib.import_module("cryptography.hazmat.primitives.serialization")
    seed = private.private_bytes(raw.Encoding.Raw, raw.PrivateFormat.Raw, raw.NoEncryption())
    public = private.public_key().public_bytes(raw.Encoding.Raw, raw.PublicFormat.Raw)
    return (f"{name}:{base64.b64encode(seed + public).decode()}", PublicKey(name, public).line())


def check_secret(secret: SecretKey) -> None:
    """The secret key's public half is the one its file records (a file pieced together wrongly is refused)."""
    private = _ed25519().Ed25519PrivateKey.from_private_bytes(secret.seed)  # MissingLibrary before any import
    raw = importlib.import_module("cryptography.hazmat.primitives.serialization")
    if private.public_key().public_bytes(raw.Encoding.Raw, raw.PublicFormat.Raw) != secret.public:
        raise KeyProblem(f"the secret key {secret.name}'s two halves do not belong together "
                         f"(its {SECRET_BYTES} bytes are the seed and then the public key)")


def sign(secret: SecretKey, manifest: bytes) -> bytes:
    """The signature object's bytes: ``NAME:BASE64\\n`` of the ed25519 signature of the manifest's bytes."""
    signature = _ed25519().Ed25519PrivateKey.from_private_bytes(secret.seed).sign(manifest)
    return f"{secret.name}:{base64.b64encode(signature).decode()}\n".encode()


def parse_signature(data: bytes) -> Tuple[str, bytes]:
    """A signature object's key name and signature; ValueError (one line) for anything else."""
    if len(data) > SIGNATURE_MAX:
        raise ValueError(f"larger than {SIGNATURE_MAX} bytes")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("not ASCII text") from None
    if text.count("\n") > 1 or (text.count("\n") == 1 and not text.endswith("\n")):
        raise ValueError("not one line")
    name, signature = split_line(text, "the signature")  # a KeyProblem is a ValueError
    if len(signature) != SIGNATURE_BYTES:
        raise ValueError(f"its signature holds {len(signature)} bytes, an ed25519 signature {SIGNATURE_BYTES}")
    return name, signature


def verify(public: PublicKey, manifest: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public``'s signature of exactly these bytes."""
    ed = _ed25519()
    exceptions = importlib.import_module("cryptography.exceptions")
    try:
        ed.Ed25519PublicKey.from_public_bytes(public.key).verify(signature, manifest)
    except exceptions.InvalidSignature:
        return False
    return True


def trusted_keys(lines: Sequence[str]) -> List[PublicKey]:
    """The settings' trusted keys (``NAME:BASE64`` lines, checked when the settings were read)."""
    return [parse_public(line, "a trusted key") for line in lines]


def untrusted(signed_by: Sequence[str], trusted: Sequence[str], label: str) -> Optional[str]:
    """Why what came from the fleet cache signed by ``signed_by`` (key lines) is not taken under ``trusted`` (the lines
    of ``label``, the setting as given), or None: taken without trusted keys, or when one of them signed it."""
    keys = {line.partition(":")[2].strip() for line in trusted}
    if not keys or any(line.partition(":")[2].strip() in keys for line in signed_by):
        return None
    came = "signed by " + ", ".join(line.partition(":")[0] for line in signed_by) if signed_by else "unsigned"
    return f"it came from the fleet cache {came}, and {label} trusts none of that now"


def manifest_sha(manifest: bytes) -> str:
    return hashlib.sha256(manifest).hexdigest()


def signatures_dir(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"entries/{kind}/{key}.sig"


def signature_path(kind: str, key: str, manifest: bytes, name: str) -> str:
    if not KEY_NAME.match(name):
        raise ValueError(f"{name!r} is not a key name")
    return f"{signatures_dir(kind, key)}/{manifest_sha(manifest)}/{name}.sig"


def live_versions(entries: Iterable[CacheEntry]) -> Dict[Tuple[str, str], Set[str]]:
    """(kind, key): the sha256s of that key's manifests among ``entries`` (what ``check_entry``'s ``live`` is)."""
    found: Dict[Tuple[str, str], Set[str]] = {}
    for entry in entries:
        found.setdefault((entry.kind, entry.key), set()).add(manifest_sha(entry.manifest))
    return found


def stale_signatures(store: Store, current: Mapping[Tuple[str, str], AbstractSet[str]]) -> List[StoredFile]:
    """Signature objects of none of the manifests in ``current`` ((kind, key): the sha256s of its manifests)."""
    split = ((stored, stored.path.split("/")) for stored in store.list_files("entries"))
    return [stored for stored, parts in split if len(parts) == 5 and parts[2].endswith(".sig") and
            parts[4].endswith(".sig") and parts[3] not in current.get((parts[1], parts[2][:-len(".sig")]), ())]


def write_signature(store: Store, kind: str, key: str, manifest: bytes, secret: SecretKey) -> str:
    """Sign the manifest's bytes and store the signature beside it (atomically); its path."""
    rel = signature_path(kind, key, manifest, secret.name)
    store.put_bytes(rel, sign(secret, manifest))
    return rel


@dataclass(frozen=True)
class Verdict:
    """What the signatures of one manifest say: who signed it, which of them verify under a trusted key."""

    trusted_by: Tuple[str, ...]  # names whose signature verifies under a trusted key of that name
    signers: Tuple[str, ...]  # names with a signature object for this version of the manifest
    problem: str  # why it is not trusted ("" when trusted_by is not empty), completing "the ... entry for X"
    keys: Tuple[str, ...] = ()  # the lines of the trusted keys those signatures verify under (not all of a name's)

    @property
    def trusted(self) -> bool:
        return bool(self.trusted_by)


def judge(manifest: bytes, signatures: Mapping[str, bytes], trusted: Sequence[PublicKey],
          other_versions: Sequence[str] = ()) -> Verdict:
    """The verdict on a manifest's bytes; ``other_versions``: names that signed other versions of it."""
    names = {public.name for public in trusted}
    verified = [public for public in trusted if public.name in signatures and
                verify(public, manifest, signatures[public.name])]
    signers = tuple(sorted(signatures))
    if verified:
        return Verdict(tuple(sorted({public.name for public in verified})), signers, "",
                       tuple(public.line() for public in verified))
    bad = [name for name in signers if name in names]
    if bad:
        return Verdict((), signers, f"was changed after {', '.join(bad)} signed it: the signature does not match "
                       "its manifest's bytes")
    if signers:
        return Verdict((), signers, f"is signed by {', '.join(signers)}, which {'is' if len(signers) == 1 else 'are'} "
                       f"not trusted (trusted: {', '.join(sorted(names))})")
    if other_versions:
        return Verdict((), (), f"was changed after {', '.join(sorted(set(other_versions)))} signed it: no signature "
                       "covers its manifest's bytes")
    return Verdict((), (), "is not signed")


def check_entry(store: Store, entry: CacheEntry, trusted: Sequence[PublicKey],
                problems: Optional[List[str]] = None, live: AbstractSet[str] = frozenset()) -> Verdict:
    """The verdict on an entry as the store holds it now (trusted names' signatures first: a flood cannot hide them;
    unreadable ones noted in ``problems``); signatures of versions in ``live`` do not say it changed."""
    top = signatures_dir(entry.kind, entry.key) + "/"
    version, prefer = manifest_sha(entry.manifest), [public.name for public in trusted]
    mine: List[Tuple[str, StoredFile]] = []
    others = set()
    for stored in store.list_files(top[:-1]):
        signed, _, leaf = stored.path[len(top):].partition("/") if stored.path.startswith(top) else ("", "", "")
        name = leaf[:-len(".sig")] if leaf.endswith(".sig") else ""
        if len(signed) != 64 or not KEY_NAME.match(name):
            continue
        if signed == version:
            mine.append((name, stored))
        elif signed not in live:
            others.add(name)
    mine.sort(key=lambda found: (found[0] not in prefer, found[0]))
    signatures: Dict[str, bytes] = {}
    for name, stored in mine[:MAX_SIGNATURES]:
        try:
            signatures[name] = _read_signature(store, name, stored)
        except ValueError as exc:
            if problems is not None:
                problems.append(f"ignored the signature {stored.path}: {exc}")
    if len(mine) > MAX_SIGNATURES and problems is not None:
        problems.append(f"read only {MAX_SIGNATURES} of the {len(mine)} signatures of {entry.kind}/{entry.key[:12]}")
    return judge(entry.manifest, signatures, trusted, sorted(others))


def _read_signature(store: Store, name: str, stored: StoredFile) -> bytes:
    """One signature object, read through the store with a bound; ValueError when it is not one."""
    if stored.size <= 0:
        raise ValueError("empty (or not a regular file)")
    if stored.size > SIGNATURE_MAX:
        raise ValueError(f"larger than {SIGNATURE_MAX} bytes")
    try:
        data = store.read_bytes(stored.path, SIGNATURE_MAX)
    except CacheError as exc:  # a link, a FIFO, a device: the store refuses to open it
        raise ValueError(str(exc)) from None
    if data is None:
        raise ValueError("removed while being read")
    named, signature = parse_signature(data)
    if named != name:
        raise ValueError(f"it is named after {name} but names the key {named}")
    return signature
