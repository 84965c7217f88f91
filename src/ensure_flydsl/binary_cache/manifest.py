"""The manifest of a cache entry: what it names (kind, key, key fields), its blob, and every member with
its hash; and where entries and blobs live in a store (content-addressed: concurrent publishers can
never leave a manifest naming another publisher's bytes).

A key has one manifest, ``entries/<kind>/<key>.json``, written by the first host that published it, and
at most one more per signing key, ``entries/<kind>/<key>.by/<NAME>.json``: the variant a host that signs
with NAME published because the first one was not signed by NAME (binary_cache/variants.py).  None of
them is ever replaced by a publish."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

from ensure_flydsl.binary_cache.archive import Member
from ensure_flydsl.binary_cache.store import StoredFile
from ensure_flydsl.support.fields import integer, seconds, short_text
from ensure_flydsl.support.keys import KEY_NAME

FORMAT = 1
# A manifest names each member with its hash (about 150 bytes a file): a real FlyDSL tree or MLIR install
# takes a few MB.  A larger object is read no further and refused, as a planted one.
MAX_MANIFEST_BYTES = 64 << 20
KIND = re.compile(r"^[a-z][a-z0-9_-]{0,31}\Z")
HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class CacheEntry:
    kind: str  # "tree" or "mlir" ("orphan" only in what prune returns: a file no manifest names)
    key: str  # hex sha256 of the canonical key fields
    blob: str  # hex sha256 of the artifact bytes
    size: int  # artifact bytes
    created: float  # time.time() of publishing
    fields: Dict[str, object]  # the key fields, for humans (cache list)
    files: int  # number of regular files in the artifact
    members: Tuple[Member, ...] = field(default=(), repr=False, compare=False)
    host: str = ""
    tool: str = ""
    # The manifest's exact bytes, as read or written: what a signature covers (binary_cache/signing.py).
    manifest: bytes = field(default=b"", repr=False, compare=False)
    # Where the manifest is in the store ("" when not known): manifest_path, or variant_path of a signer.
    path: str = field(default="", repr=False, compare=False)

    @property
    def variant(self) -> str:
        """The signer whose variant this entry is (its manifest at ``<key>.by/<NAME>.json``), else ""."""
        folder, _, leaf = self.path.rpartition("/")
        if folder.endswith(".by") and leaf.endswith(".json"):
            return leaf[: -len(".json")]
        return ""

    def to_json(self) -> Dict[str, object]:
        return {"kind": self.kind, "key": self.key, "blob": self.blob, "size": self.size, "created": self.created,
                "fields": self.fields, "files": self.files, "host": self.host, "tool": self.tool,
                "path": self.path, "variant": self.variant or None}


def cache_key(kind: str, fields: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of ``{"kind": kind, **fields}``."""
    if "kind" in fields:
        raise ValueError("the key fields may not contain 'kind'; it is the cache_key argument")
    try:
        text = json.dumps({"kind": kind, **fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cache key fields must be JSON values: {exc}") from None
    return hashlib.sha256(text.encode()).hexdigest()


def orphan_entry(stored: StoredFile, sha: str) -> CacheEntry:
    return CacheEntry(kind="orphan", key="", blob=sha, size=stored.size, created=stored.mtime or 0.0,
                      fields={"path": stored.path}, files=0)


def check_name(kind: str, key: str) -> None:
    if not KIND.match(kind):
        raise ValueError(f"cache kind {kind!r} is not a short lower-case name such as 'tree' or 'mlir'")
    if not HEX64.match(key):
        raise ValueError(f"cache key {key!r} is not a hex sha256 (use cache_key)")


def manifest_path(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"entries/{kind}/{key}.json"


def variants_dir(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"entries/{kind}/{key}.by"


def variant_path(kind: str, key: str, name: str) -> str:
    """The manifest a host signing with the key NAME publishes when the key's first manifest is not NAME's."""
    if not KEY_NAME.match(name):
        raise ValueError(f"{name!r} is not a key name")
    return f"{variants_dir(kind, key)}/{name}.json"


def blob_path(blob: str) -> str:
    return f"blobs/{blob}.tar.gz"


def manifest_bytes(entry: CacheEntry) -> bytes:
    data = {"format": FORMAT, "kind": entry.kind, "key": entry.key, "fields": entry.fields, "blob": entry.blob,
            "size": entry.size, "created": entry.created, "host": entry.host, "tool": entry.tool,
            "members": [m.to_json() for m in entry.members]}
    return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()


def newer_format(data: bytes) -> bool:
    """Whether ``data`` is a manifest of a format newer than this tool's (a later version wrote it: never
    replaced, though this tool cannot read it); a torn or foreign file is not."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        return False
    fmt = obj.get("format") if isinstance(obj, dict) else None
    return isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > FORMAT


def parse_manifest(data: bytes, path: str = "") -> CacheEntry:
    """The entry a manifest describes (read at ``path``); ValueError (one line) for anything that is not a
    well-formed one."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not JSON (torn or foreign file)") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.get("format") != FORMAT:
        raise ValueError(f"format {obj.get('format')!r}, this tool reads {FORMAT}")
    kind, key, blob, fields = obj.get("kind"), obj.get("key"), obj.get("blob"), obj.get("fields")
    size, created, raw_members = obj.get("size"), obj.get("created"), obj.get("members")
    if not (isinstance(kind, str) and isinstance(key, str) and KIND.match(kind) and HEX64.match(key)):
        raise ValueError("kind or key missing or malformed")
    if not isinstance(fields, dict) or cache_key(kind, fields) != key:
        raise ValueError("its key is not the hash of its fields")
    if not (isinstance(blob, str) and HEX64.match(blob)):
        raise ValueError("blob is not a sha256")
    size, created = integer(size), seconds(created)
    if size is None or size < 0 or created is None:
        # created: a time (NaN, Infinity or a year past 2286 is none; `cache list` shows it as a date)
        raise ValueError("size or created missing or out of range")
    if not isinstance(raw_members, list):
        raise ValueError("members missing")
    members = tuple(Member.from_json(m) for m in raw_members)
    return CacheEntry(kind=kind, key=key, blob=blob, size=size, created=float(created), fields=fields,
                      files=sum(1 for m in members if m.type == "file"), members=members,
                      host=short_text(obj.get("host")) or "", tool=short_text(obj.get("tool")) or "", manifest=data,
                      path=path)
