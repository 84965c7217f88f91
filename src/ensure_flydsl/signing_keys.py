"""The settings FLYDSL_CACHE_SIGNING_KEY and FLYDSL_CACHE_TRUSTED_KEYS, read and checked (bad input is exit 64
before anything is touched).  The keys' formats and files are :mod:`ensure_flydsl.support.keys`.  The
settings import this module only when a key setting is set, so the warm call does not.
"""

from __future__ import annotations

import re
from typing import List, Tuple

from ensure_flydsl.errors import BadInput
from ensure_flydsl.setting_values import parse_plain_path
from ensure_flydsl.support.keys import (
    KeyProblem,
    library_available,
    library_hint,
    looks_inline,
    parse_public,
    read_public_keys,
    read_secret_key,
    withheld,
)

_CONTROL = r"[\x00-\x1f\x7f]"  # compiled at first use (re caches it): not on the warm path

# -- the settings: FLYDSL_CACHE_SIGNING_KEY and FLYDSL_CACHE_TRUSTED_KEYS ----------------------------------

# The trusted keys, each as its normalised public line "NAME:BASE64" (public: they may travel in settings).
TrustedKeys = Tuple[str, ...]  # as settings.py names it
TRUSTED_ALLOWED = ("whitespace-separated public keys NAME:BASE64 (32-byte ed25519, as `cache keygen` writes to "
                   "NAME.pub) or paths to such .pub files")


def _need_library(name: str, value: str) -> None:
    if not library_available():
        raise BadInput(name, value, "a key needs the cryptography package, which this Python lacks: "
                       + library_hint(f"unset {name}"))


def parse_signing_key(name: str, value: str) -> str:
    """The secret key file's absolute path, once it reads as a secret key only its owner may read."""
    if looks_inline(value.strip()):
        raise BadInput(name, withheld(value.strip()), "the path of a secret key file (from `ensure-flydsl cache "
                       "keygen`), not the key itself: a key in the environment would be copied into every child "
                       "process")
    path = parse_plain_path(name, value)
    try:
        read_secret_key(path)
    except KeyProblem as exc:
        raise BadInput(name, value, f"a secret key file written by `ensure-flydsl cache keygen` (mode 600); {exc}"
                       ) from None
    _need_library(name, value)
    return path


def parse_trusted_keys(name: str, value: str) -> TrustedKeys:
    if not value.strip():
        # Not the default (settings.py: EMPTY_REFUSED): an empty value would check no signatures at all.
        raise BadInput(name, value, f"{TRUSTED_ALLOWED}; set but empty, it would check no signatures (a `$(cat "
                       "NAME.pub)` that could not read its file gives this): give the .pub file's absolute path (the "
                       "setting reads the file), or leave the setting unset to check none")
    items = value.split()
    # Shown in the message (and so the failure marker) with every inline key withheld: a secret pasted
    # here by mistake must not be copied anywhere.
    shown = " ".join(withheld(item) for item in items)
    if not items or re.search(_CONTROL, value.replace("\t", " ").replace("\n", " ")):
        raise BadInput(name, shown, TRUSTED_ALLOWED)
    keys: List[str] = []
    try:
        for item in items:
            if looks_inline(item):
                found = [parse_public(item, f"the key {item.partition(':')[0]}")]
            else:
                found = read_public_keys(parse_plain_path(name, item))
            keys.extend(key.line() for key in found if key.line() not in keys)
    except KeyProblem as exc:
        raise BadInput(name, shown, f"{TRUSTED_ALLOWED}; {exc}") from None
    _need_library(name, shown)
    return tuple(keys)
