"""Each setting's value, checked and parsed: each check takes the raw string and the name to blame (the
flag or variable as the user spelled it) and returns the parsed value or raises BadInput (exit 64).  Also
how two values of a setting compare: a version against the floor, two repository addresses."""

from __future__ import annotations

import enum
import importlib.util
import os
import re
import socket

# re is imported where a value is matched: the warm call imports none (under python3 -E -S, as the GEAK folder
# runs the tool, its import costs as much as the interpreter's start: tests/scenarios/test_warm_imports.py)
from typing import Dict, List, Mapping, Optional, Tuple

from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import BadInput
from ensure_flydsl.support.fields import SHORT_TEXT_MAX, short_text
from ensure_flydsl.support.install_route import extra_remedy
from ensure_flydsl.support.urls import shown_location


class Strategy(str, enum.Enum):
    """FLYDSL_STRATEGY's values; which ways each tries, and in what order, is ``ways.STRATEGY``'s."""

    AUTO = "auto"
    SOURCE = "source"
    RELEASE = "release"
    REUSE_ONLY = "reuse-only"

    def __str__(self) -> str:
        return str(self.value)


STRATEGIES = tuple(s.value for s in Strategy)

# Linux's limits: a name of at most NAME_MAX bytes, a path of fewer than PATH_MAX bytes (it counts the NUL).
NAME_MAX = 255
PATH_MAX = 4096
# Beside a file it writes, the tool writes a temporary twin (".NAME.xxxxxxxx.tmp") and, for the lock, NAME.holder.
WRITTEN_FILE_ROOM = 32
# The root gets a checkout, a build and an LLVM install beside it: their files lie up to ~1 KB deeper.
ROOT_ROOM = 1024

# The control characters no path, name or URL of a setting may hold: a set, not a pattern, since every call
# checks its paths for them (compiling the pattern alone cost 0.36 M instructions, 0.3 % of a warm call).
_CONTROL = frozenset(map(chr, (*range(0x20), 0x7F)))
# Patterns compiled at first use (re caches them): only a setting that is given needs its own.
_URL_SCHEMES = ("https://", "http://", "ssh://", "git://", "file://")
_SCP_LIKE = r"^[A-Za-z0-9_.+-]+@[A-Za-z0-9_.-]+:[^-]"
_HELPER = r"^[A-Za-z][A-Za-z0-9+.-]*::"  # git's remote helpers: "ext::cmd", "fd::0"
PIN = r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}\Z"
MODULE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _matches(pattern: str, value: str) -> bool:
    return re.match(pattern, value) is not None


def _has_control(value: str) -> bool:
    return not _CONTROL.isdisjoint(value)


def check_utf8(name: str, value: str, what: str = "a path") -> None:
    """Refuse a value that is not valid UTF-8 (Python hands undecodable bytes over as lone surrogates):
    it would end up in the env file and its JSON twin, which must be valid text for sh and JSON."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(name, value, f"{what} that is valid UTF-8 (it goes into the env file, its JSON twin and "
                       "the markers, which must be valid text for sh and JSON)") from None


def check_length(name: str, path: str, *, room: int = 0, leaf_room: int = 0) -> None:
    """Refuse a path the kernel would refuse (ENAMETOOLONG) once the tool writes files ``room`` bytes below
    it, or a file whose name is up to ``leaf_room`` bytes longer beside it."""
    parts = os.fsencode(path).split(b"/")
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        limit = NAME_MAX - (leaf_room if last else 0)
        if len(part) > limit:
            why = "; the tool writes files with longer names beside it" if last and leaf_room else ""
            raise BadInput(name, path, f"a path whose every name between slashes is at most {limit} bytes (one "
                           f"here has {len(part)}; Linux allows {NAME_MAX}{why})")
    limit = PATH_MAX - 1 - max(room, leaf_room)
    size = len(os.fsencode(path))
    if size > limit:
        why = f"; the tool's files lie up to {room} bytes deeper" if room else ""
        raise BadInput(name, path, f"a path of at most {limit} bytes (this one has {size}; Linux allows "
                       f"{PATH_MAX - 1}{why})")


def _path(name: str, value: str, *, pythonpath_entry: bool = False, room: int = 0, leaf_room: int = 0) -> str:
    check_utf8(name, value)
    if _has_control(value):
        raise BadInput(name, value, "a path without newlines or control characters")
    if pythonpath_entry and ":" in value:
        # The root's folders go on PYTHONPATH, whose separator is ':'; such a root could never be imported.
        raise BadInput(name, value, "a path without ':' (its folders go on PYTHONPATH)")
    path = os.path.abspath(value)
    check_utf8(name, path)  # a relative path under an undecodable working folder
    check_length(name, path, room=room, leaf_room=leaf_room)
    return path


def parse_root(name: str, value: str) -> str:
    root = _path(name, value, pythonpath_entry=True, room=ROOT_ROOM)
    if root == "/":
        raise BadInput(name, value, "a dedicated folder, not / (the tool builds into it and writes next to it)")
    return root


def parse_min_version(name: str, value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise BadInput(name, value, "a PEP 440 version such as 0.2.2") from None
    return value


def release_at_least(version: str, floor: str) -> bool:
    """Whether the release segment of ``version`` is >= that of ``floor`` (0.2.2.dev3+g1 passes 0.2.2).

    Raises InvalidVersion for a version packaging cannot parse.
    """

    have = Version(version).release
    need = Version(floor).release
    return Version(".".join(map(str, have))) >= Version(".".join(map(str, need)))


def parse_pin(name: str, value: str) -> str:
    if (
        not re.match(PIN, value)
        or ".." in value
        or "//" in value
        or "@{" in value
        or value.endswith((".lock", "/", "."))
    ):
        allowed = "a commit hash or a tag/branch name (letters, digits, . _ / + -, not starting with -)"
        raise BadInput(name, value, allowed)
    return value


def parse_repo(name: str, value: str) -> str:
    if value.startswith("-") or _has_control(value):
        raise BadInput(name, value, "a repository URL (https, ssh, git, file) or a local path; never an option")
    check_utf8(name, value, "a URL or a path")
    # Neither pattern can match without its "@" or "://": a local path needs no re (the warm call's settings).
    if value.startswith(_URL_SCHEMES) or ("@" in value and _matches(_SCP_LIKE, value)):
        return value
    if "::" in value or ("://" in value and _matches(r"^[A-Za-z][A-Za-z0-9+.-]*://", value)):
        # git's "ext::" and other remote helpers run commands; only the plain transports are allowed.
        raise BadInput(name, value, "a URL with scheme https, http, ssh, git or file, or a local path")
    return _path(name, value)


def same_repo(url_a: str, url_b: str) -> bool:
    """Whether two repository addresses name the same repository (``.git``, ``file://``, slashes aside)."""

    def norm(url: str) -> str:
        url = url.strip()
        if url.startswith("file://"):
            url = url[len("file://"):]
        url = url.rstrip("/")
        if url.endswith(".git"):
            url = url[: -len(".git")]
        if url.startswith("/"):
            url = os.path.normpath(url)
        return url.rstrip("/").lower() if "://" in url or "@" in url else url.rstrip("/")

    return norm(url_a) == norm(url_b)


def parse_python(name: str, value: str) -> str:
    check_utf8(name, value)
    if _has_control(value):
        raise BadInput(name, value, "an interpreter name on PATH or a path to one")
    # A relative path is relative to the caller's folder (the probe and the build run elsewhere); a bare
    # name is looked up on PATH.
    if "/" not in value:
        check_length(name, value)
        return value
    return _path(name, value)


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise BadInput(name, value, "one of 1/0, true/false, yes/no, on/off")


def parse_require(name: str, value: str) -> Tuple[str, ...]:
    modules = tuple(m.strip() for m in value.split(",") if m.strip())
    bad = [m for m in modules if not re.match(MODULE, m)]
    if not modules or bad:
        raise BadInput(name, value, "comma-separated module names such as flydsl,kernels.moe_gemm_2stage")
    return modules


def parse_strategy(name: str, value: str) -> Strategy:
    if value not in STRATEGIES:
        raise BadInput(name, value, "one of " + ", ".join(STRATEGIES))
    return Strategy(value)


def parse_jobs(name: str, value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1 or jobs > 4096:
        raise BadInput(name, value, "a whole number of parallel jobs from 1 to 4096")
    return jobs


def parse_lock_timeout(name: str, value: str) -> Optional[float]:
    if value.strip().lower() in ("none", "inf", "infinite"):
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not (0 <= seconds < 10**9):
        raise BadInput(name, value, "seconds to wait (a number >= 0), or 'none' to wait as long as it takes")
    return seconds


def parse_probe_timeout(name: str, value: str) -> float:
    # A probe that may hang forever blocks the run: nan and inf are refused.
    return _positive_seconds(name, value, 10**9, "seconds an import probe may take (a number > 0), such as 300")


def parse_lease_ttl(name: str, value: str) -> float:
    # A lease that never dies would stop a fleet: nan and inf are refused.
    return _positive_seconds(name, value, 10**6,
                             "seconds a build lease lives without a heartbeat (a number > 0), such as 120")


def _positive_seconds(name: str, value: str, below: float, allowed: str) -> float:
    """A number of seconds, > 0 and < ``below`` (so never nan or inf); else BadInput saying ``allowed``."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not (0 < seconds < below):
        raise BadInput(name, value, allowed)
    return seconds


def parse_cache(name: str, value: str) -> str:
    check_utf8(name, value, "a folder path or URL")
    if _has_control(value) or value.startswith("-"):
        raise BadInput(name, value, "a folder path or an fsspec URL such as s3://bucket/prefix")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", value):
        _need_url_libraries(name, value)
        return value
    return _path(name, value, room=NAME_MAX)  # entries are written in it


def _need_url_libraries(name: str, value: str) -> None:
    """A URL cache needs fsspec (and s3fs for S3): without them the run could not use the cache it was told to
    use, so the setting is refused before anything is touched, with the remedy for the way the tool was
    installed (the GEAK folder vendors no extras)."""

    scheme = value.split("://", 1)[0].lower()
    needed = ["fsspec"] + (["s3fs"] if scheme in ("s3", "s3a") else [])
    missing = [module for module in needed if importlib.util.find_spec(module) is None]
    if missing:
        raise BadInput(name, shown_location(value), f"the {scheme}:// cache needs {' and '.join(missing)}, which "
                       "this Python lacks: " + extra_remedy("s3", "point FLYDSL_CACHE at a folder"))


def parse_store(name: str, value: str) -> str:
    """The host store's folder, or ``off`` (no store: every root keeps a tree of its own)."""
    if value.strip().lower() == "off":
        return "off"
    return _path(name, value, room=ROOT_ROOM)


def parse_plain_path(name: str, value: str) -> str:
    return _path(name, value)


def parse_written_file(name: str, value: str) -> str:
    """The lock file and the failure marker: the tool writes them, and temporary files beside them."""
    return _path(name, value, leaf_room=WRITTEN_FILE_ROOM)


# (FROM, TO) URL prefixes: git fetches what starts with FROM from TO instead (url.<TO>.insteadOf <FROM>).
GitMirrors = Tuple[Tuple[str, str], ...]
MIRRORS_ALLOWED = ("whitespace-separated FROM=TO pairs (URL prefixes; TO a https, http, ssh, git or file URL or a "
                   "local path), such as https://github.com/=https://git.example.internal/github/")


def _mirror_to(name: str, value: str, pair: str, to: str) -> str:
    """A mirror's TO: a URL of a plain transport, scp-like, or a local path made absolute (git rewrites URLs
    for commands that run in several folders), keeping a trailing slash: TO is a prefix."""

    if to.startswith(_URL_SCHEMES) or re.match(_SCP_LIKE, to):
        return to
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", to):
        raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {pair!r} has a TO of another scheme")
    path = os.path.abspath(to) + ("/" if to.endswith("/") else "")
    check_length(name, path)
    return path


def _mirror_pair(name: str, value: str, pair: str) -> Tuple[str, str]:
    source, equals, to = pair.partition("=")
    if not equals or not source or not to:
        raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {pair!r} is not FROM=TO with both non-empty")
    if source.startswith("-") or to.startswith("-"):
        raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {pair!r} starts with '-' (never an option)")
    if re.match(_HELPER, source) or re.match(_HELPER, to):
        # ext:: runs a command and fd:: talks to a descriptor: only the plain transports are allowed.
        raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {pair!r} names a remote helper (ext::, fd::, ...)")
    return source, _mirror_to(name, value, pair, to)


def git_config_count(environ: Mapping[str, str]) -> int:
    """The caller's own GIT_CONFIG_COUNT (0 when unset): the mirrors' entries go after that many."""
    raw = environ.get("GIT_CONFIG_COUNT", "").strip()
    if raw and not raw.isdigit():
        # git itself refuses every command then ("bogus count"); say so before anything runs.
        raise BadInput("GIT_CONFIG_COUNT", raw, "a whole number >= 0 (git reads that many GIT_CONFIG_KEY_n/"
                       "GIT_CONFIG_VALUE_n pairs; FLYDSL_GIT_MIRRORS appends its own after them)")
    return int(raw or "0")


HOST_ID = "FLYDSL_HOST_ID"


def check_host_id(environ: Mapping[str, str]) -> None:
    """FLYDSL_HOST_ID, when set, names this host in the build lease records every other host reads: it must
    be text such a record may carry (support/fields.py: short_text), or they would read this host's lease
    as an unknown host's."""
    value = environ.get(HOST_ID, "")
    if value and short_text(value) is None:
        length = f" (this one has {len(value)})" if len(value) > SHORT_TEXT_MAX else ""
        raise BadInput(HOST_ID, value, f"a name of 1 to {SHORT_TEXT_MAX} printable characters{length}, no control "
                       "characters or line breaks: it names this host in the build lease records other hosts "
                       "read; leave it unset for the host name")


def host_id(environ: Mapping[str, str]) -> str:
    """This host's name in the records other hosts (and a fleet's collector) read: FLYDSL_HOST_ID (checked
    with the settings, ``check_host_id``), else the host name as text such a record carries: the kernel
    allows any byte in one, and a record with a control character in its host is an unknown host's."""
    given = environ.get(HOST_ID)
    if given:
        return given

    name = socket.gethostname()
    return short_text(name) or "".join(c if c.isprintable() else "?" for c in name)[:SHORT_TEXT_MAX] or "localhost"


def parse_git_mirrors(name: str, value: str) -> GitMirrors:
    check_utf8(name, value, "URL prefixes")
    if _has_control(value.replace("\t", " ").replace("\n", " ")):  # tabs and newlines separate pairs
        raise BadInput(name, value, f"{MIRRORS_ALLOWED}; no control characters")
    chosen: Dict[str, str] = {}
    pairs: List[Tuple[str, str]] = []
    for pair in value.split():
        source, to = _mirror_pair(name, value, pair)
        if chosen.get(source, to) != to:
            raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {source} is given two mirrors ({chosen[source]} and "
                           f"{to}): one TO for each FROM")
        if source not in chosen:
            chosen[source] = to
            pairs.append((source, to))
    if not pairs:
        raise BadInput(name, value, MIRRORS_ALLOWED)
    return tuple(pairs)
