"""The cache's signing keys in Nix's formats (``nix-store --generate-binary-cache-key``): one ``NAME:BASE64`` line
of a 32-byte ed25519 public key (``NAME.pub``), of the 64-byte seed and public key (``NAME.secret``, mode 600), or
of a 64-byte signature.  No message made here holds key material: a bad line is named by its key name or file."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import stat
from dataclasses import dataclass, field
from typing import List, Tuple

KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
NAME_ALLOWED = "a key name of letters, digits, '.', '_' and '-' (at most 64, not starting with '.', '_' or '-')"
PUBLIC_BYTES = 32
SECRET_BYTES = 64  # the seed, then the public key (Nix's layout)
SIGNATURE_BYTES = 64
KEY_FILE_MAX = 4096  # a key file is one short line; more is not a key file
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}\Z")


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
