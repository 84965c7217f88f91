"""The settings: one table, each row a field of :class:`Request` or :class:`Settings`, a variable and a flag (which
wins); a bad value, or two settings naming one file, is a :class:`BadInput` (exit 64) before anything is written."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
import os
import re
import socket
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from packaging.version import InvalidVersion, Version

from ensure_flydsl import layout
from ensure_flydsl.errors import BadInput, StrEnum
from ensure_flydsl.support.fields import SHORT_TEXT_MAX, short_text
from ensure_flydsl.support.launcher import command, extra_remedy
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.trees import signing as keys
from ensure_flydsl.warm import DEFAULT_ROOT


class Strategy(StrEnum):
    """FLYDSL_STRATEGY's values; which ways each tries, in what order, is ``ways.STRATEGY``'s."""

    AUTO = "auto"
    SOURCE = "source"
    RELEASE = "release"
    REUSE_ONLY = "reuse-only"


STRATEGIES = tuple(s.value for s in Strategy)
DEFAULT_MIN_VERSION = "0.2.2"
DEFAULT_PIN = "a35627a2fef0a5a70c63536c4174674223866737"
DEFAULT_REPO = "https://github.com/ROCm/FlyDSL.git"
DEFAULT_REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")
DEFAULT_PROBE_TIMEOUT = 300.0
VALUE, FLAG, LIST, SWITCH = "value", "flag", "list", "switch"  # --root X, --verify, --require A..., --[no-]vllm-moe
GROUPS = {  # the concerns the help lists the settings by
    "root": "the root and the files beside it",
    "import": "what must import, and how it is checked",
    "build": "what is provisioned when nothing is reused, and how",
    "env file": "what the env file exports besides the tree",
    "cache": "the binary cache shared between hosts",
    "store": "the host store the roots of this host copy their trees from",
}
# Trusted keys set but empty (a `$(cat ci.pub)` that read nothing) would turn the signature checks off.
EMPTY_REFUSED = frozenset({"cache_trusted_keys"})
GitMirrors = Tuple[Tuple[str, str], ...]  # (FROM, TO) URL prefixes: git fetches FROM... from TO...
TrustedKeys = Tuple[str, ...]  # public key lines NAME:BASE64
HOST_ID = "FLYDSL_HOST_ID"

NAME_MAX, PATH_MAX = 255, 4096  # Linux's; PATH_MAX counts the NUL
WRITTEN_FILE_ROOM = 32  # the temporary twin ".NAME.xxxxxxxx.tmp" and NAME.holder beside a file the tool writes
ROOT_ROOM = 1024  # the checkout, the build and LLVM lie up to ~1 KB below the root
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_URL = r"^[A-Za-z][A-Za-z0-9+.-]*://"
_GIT_URL = r"^((https?|ssh|git|file)://|[A-Za-z0-9_.+-]+@[A-Za-z0-9_.-]+:[^-])"  # the URLs git fetches (scp-like too)
_HELPER = r"^[A-Za-z][A-Za-z0-9+.-]*::"  # git's remote helpers ("ext::cmd", "fd::0") run commands
_PIN = r"^[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}\Z"
MIRRORS_ALLOWED = ("whitespace-separated FROM=TO pairs (URL prefixes; TO a https, http, ssh, git or file URL or a "
                   "local path), such as https://github.com/=https://git.example.internal/github/")
TRUSTED_ALLOWED = ("whitespace-separated public keys NAME:BASE64 (32-byte ed25519, as `cache keygen` writes to "
                   "NAME.pub) or paths to such .pub files")


# -- each value, checked: a parser takes the name to blame and the text, and returns the value ----------------
def _text(name: str, value: str, what: str, allowed: str = "", *, dash: bool = False, separated: bool = False) -> None:
    """UTF-8; with ``allowed``: no control character (bar between ``separated`` items), no leading '-' (``dash``)."""
    try:  # Python hands undecodable bytes over as lone surrogates; the env file and its twin must be valid text.
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(name, value, f"{what} that is valid UTF-8 (it goes into the env file, its JSON twin and "
                       "the markers, which must be valid text for sh and JSON)") from None
    if allowed and (_CONTROL.search(re.sub("[\t\n]", " ", value) if separated else value)
                    or dash and value.startswith("-")):
        raise BadInput(name, value, allowed)


def _length(name: str, path: str, *, room: int = 0, leaf_room: int = 0) -> None:
    """Refuse a path the kernel would refuse (ENAMETOOLONG) once the tool writes ``room`` bytes below it."""
    *folders, leaf = os.fsencode(path).split(b"/")
    for part, limit in [*((folder, NAME_MAX) for folder in folders), (leaf, NAME_MAX - leaf_room)]:
        if len(part) > limit:
            why = "; the tool writes files with longer names beside it" if limit < NAME_MAX else ""
            raise BadInput(name, path, f"a path whose every name between slashes is at most {limit} bytes (one "
                           f"here has {len(part)}; Linux allows {NAME_MAX}{why})")
    limit = PATH_MAX - 1 - max(room, leaf_room)
    size = len(os.fsencode(path))
    if size > limit:
        why = f"; the tool's files lie up to {room} bytes deeper" if room else ""
        raise BadInput(name, path, f"a path of at most {limit} bytes (this one has {size}; Linux allows "
                       f"{PATH_MAX - 1}{why})")


def _need(name: str, value: str, what: str, modules: List[str], extra: str, instead: str) -> None:
    """Refuse a setting whose use needs packages this Python lacks: the run could not do what it was told."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise BadInput(name, value, f"{what} needs {' and '.join(missing)}, which this Python lacks: "
                       + extra_remedy(extra, instead))


def parse_path(name: str, value: str, *, pythonpath_entry: bool = False, room: int = 0, leaf_room: int = 0) -> str:
    try:
        path = os.path.abspath(value)
    except OSError:  # getcwd() of a working folder that was removed
        raise BadInput(name, value, "an absolute path (a relative one is read from the working folder, which is "
                       "gone)") from None
    checked = [(value, "")]
    if not os.path.isabs(value):  # it takes on the working folder's characters (that folder exists: abspath read it)
        checked.append((path, f" (relative: its working folder is {os.getcwd()!r})"))
    for text, where in checked:
        _text(name, text, "a path" + where)
        if _CONTROL.search(text):
            raise BadInput(name, value, "a path without newlines or control characters" + where)
        if pythonpath_entry and ":" in text:  # PYTHONPATH's separator: such a root could never be imported
            raise BadInput(name, value, "a path without ':' (its folders go on PYTHONPATH)" + where)
    _length(name, path, room=room, leaf_room=leaf_room)
    return path


# The lock file and the failure marker: the tool writes them, and temporary files beside them.
parse_written_file = functools.partial(parse_path, leaf_room=WRITTEN_FILE_ROOM)


def parse_root(name: str, value: str) -> str:
    root = parse_path(name, value, pythonpath_entry=True, room=ROOT_ROOM)
    if root == "/":
        raise BadInput(name, value, "a dedicated folder, not / (the tool builds into it and writes next to it)")
    return root


def parse_store(name: str, value: str) -> str:
    """The host store's folder, or ``off``: every root keeps a tree of its own."""
    return "off" if value.strip().lower() == "off" else parse_path(name, value, room=ROOT_ROOM)


def parse_min_version(name: str, value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise BadInput(name, value, "a PEP 440 version such as 0.2.2") from None
    return value


def release_at_least(version: str, floor: str) -> bool:
    """Whether the release segment of ``version`` is >= the floor's (0.2.2.dev3+g1 passes 0.2.2)."""
    have, need = Version(version).release, Version(floor).release
    return Version(".".join(map(str, have))) >= Version(".".join(map(str, need)))


def parse_pin(name: str, value: str) -> str:
    if not re.match(_PIN, value) or any(bad in value for bad in ("..", "//", "@{")) or value.endswith(
            (".lock", "/", ".")):
        raise BadInput(name, value, "a commit hash or a tag/branch name (letters, digits, . _ / + -, not starting "
                       "with -)")
    return value


def parse_repo(name: str, value: str) -> str:
    _text(name, value, "a URL or a path", "a repository URL (https, ssh, git, file) or a local path; never an option",
          dash=True)
    if re.match(_GIT_URL, value):
        return value
    if "::" in value or re.match(_URL, value):
        raise BadInput(name, value, "a URL with scheme https, http, ssh, git or file, or a local path")
    return parse_path(name, value)


def parse_python(name: str, value: str) -> str:
    _text(name, value, "a path", "an interpreter name on PATH or a path to one")
    if "/" not in value:  # a bare name is looked up on PATH; a path is the caller's (the build runs elsewhere)
        _length(name, value)
        return value
    return parse_path(name, value)


def parse_bool(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return lowered in ("1", "true", "yes", "on")
    raise BadInput(name, value, "one of 1/0, true/false, yes/no, on/off")


def parse_require(name: str, value: str) -> Tuple[str, ...]:
    modules = tuple(m.strip() for m in value.split(",") if m.strip())
    if not modules or not all(m.isascii() and all(p.isidentifier() for p in m.split(".")) for m in modules):
        raise BadInput(name, value, "comma-separated module names such as flydsl,kernels.moe_gemm_2stage")
    return modules


def parse_strategy(name: str, value: str) -> Strategy:
    if value not in STRATEGIES:
        raise BadInput(name, value, "one of " + ", ".join(STRATEGIES))
    return Strategy(value)


def _number(allowed: str, below: float, *, whole: bool = False, least: Optional[float] = None,
            none_ok: bool = False) -> Callable[[str, str], Optional[float]]:
    """A parser of a number (> 0, or >= ``least``) below ``below``; ``none`` waits forever if ``none_ok``."""

    def parse(name: str, value: str) -> Optional[float]:
        if none_ok and value.strip().lower() in ("none", "inf", "infinite"):
            return None
        try:
            number = int(value) if whole else float(value)
        except ValueError:
            number = float("nan")  # fails the range check
        if not ((number > 0 if least is None else number >= least) and number < below):
            raise BadInput(name, value, allowed)
        return number

    return parse


parse_jobs = _number("a whole number of parallel jobs from 1 to 4096", 4097, whole=True)
parse_lock_timeout = _number("seconds to wait (a number >= 0), or 'none' to wait as long as it takes", 10**9,
                             least=0, none_ok=True)
# A probe that may hang forever blocks the run, and a lease that never dies would stop a fleet: inf is refused.
parse_probe_timeout = _number("seconds an import probe may take (a number > 0), such as 300", 10**9)
# Its holder writes a heartbeat every TTL/4: a TTL below a second would write to the store in a tight loop.
parse_lease_ttl = _number("seconds a build lease lives without a heartbeat (a number >= 1), such as 120", 10**6,
                          least=1)


def parse_cache(name: str, value: str) -> str:
    _text(name, value, "a folder path or URL", "a folder path or an fsspec URL such as s3://bucket/prefix", dash=True)
    if not re.match(_URL, value):
        return parse_path(name, value, room=NAME_MAX)  # entries are written in it
    scheme = value.split("://", 1)[0].lower()
    needs = ["fsspec", "s3fs"] if scheme in ("s3", "s3a") else ["fsspec"]
    _need(name, shown_location(value), f"the {scheme}:// cache", needs, "s3", "point FLYDSL_CACHE at a folder")
    return value


def parse_mlir_url(name: str, value: str) -> str:
    _text(name, value, "a URL")
    if value in ("off", "triton"):
        return value
    rest = re.sub(r"\{llvm8?\}", "", value)  # no other braces: a typo such as {llvm_commit} would go unfilled
    if _CONTROL.search(value) or not re.match(_URL, value) or "{" in rest or "}" in rest:
        raise BadInput(name, shown_location(value), "off, triton (Triton's public LLVM builds), or the URL of a tar.gz "
                       "holding an LLVM/MLIR install (http, https, file or an fsspec URL), {llvm} or {llvm8} standing "
                       "for the pin's LLVM commit")
    scheme = value.split("://", 1)[0].lower()
    if scheme not in ("http", "https", "file"):
        _need(name, shown_location(value), f"a {scheme}:// URL", ["fsspec"], "s3", "use an http, https or file URL")
    return value


def parse_git_mirrors(name: str, value: str) -> GitMirrors:
    _text(name, value, "URL prefixes", f"{MIRRORS_ALLOWED}; no control characters", separated=True)
    chosen: Dict[str, str] = {}
    for pair in value.split():
        source, equals, to = pair.partition("=")
        for wrong, why in ((not (equals and source and to), "is not FROM=TO with both non-empty"),
                           (source.startswith("-") or to.startswith("-"), "starts with '-' (never an option)"),
                           (re.match(_HELPER, source) or re.match(_HELPER, to),
                            "names a remote helper (ext::, fd::, ...)"),
                           (re.match(_URL, to) and not re.match(_GIT_URL, to), "has a TO of another scheme")):
            if wrong:
                raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {pair!r} {why}")
        if not re.match(_GIT_URL, to):  # a local TO, made absolute (git runs in several folders); a prefix keeps its /
            to = parse_path(name, to) + ("/" if to.endswith("/") else "")
        if chosen.setdefault(source, to) != to:
            raise BadInput(name, value, f"{MIRRORS_ALLOWED}; {source} is given two mirrors ({chosen[source]} and "
                           f"{to}): one TO for each FROM")
    if not chosen:
        raise BadInput(name, value, MIRRORS_ALLOWED)
    return tuple(chosen.items())


def git_config_count(environ: Mapping[str, str]) -> int:
    """The caller's own GIT_CONFIG_COUNT (0 when unset): the mirrors' entries go after that many."""
    raw = environ.get("GIT_CONFIG_COUNT", "").strip()
    if raw and not raw.isdigit():  # git itself refuses every command then ("bogus count")
        raise BadInput("GIT_CONFIG_COUNT", raw, "a whole number >= 0 (git reads that many GIT_CONFIG_KEY_n/"
                       "GIT_CONFIG_VALUE_n pairs; FLYDSL_GIT_MIRRORS appends its own after them)")
    return int(raw or "0")


def check_host_id(environ: Mapping[str, str]) -> None:
    """FLYDSL_HOST_ID names this host in the lease records other hosts read: text such a record carries."""
    value = environ.get(HOST_ID, "")
    if value and short_text(value) is None:
        length = f" (this one has {len(value)})" if len(value) > SHORT_TEXT_MAX else ""
        raise BadInput(HOST_ID, value, f"a name of 1 to {SHORT_TEXT_MAX} printable characters{length}, no control "
                       "characters or line breaks: it names this host in the build lease records other hosts "
                       "read; leave it unset for the host name")


def host_id(environ: Mapping[str, str]) -> str:
    """This host's name in the records other hosts read: FLYDSL_HOST_ID, else the host name made printable."""
    check_host_id(environ)  # the one rule, for `stats` too
    name = socket.gethostname()
    return environ.get(HOST_ID) or short_text(name) or "".join(
        c if c.isprintable() else "?" for c in name)[:SHORT_TEXT_MAX] or "localhost"


def parse_signing_key(name: str, value: str) -> str:
    """The secret key file's absolute path, once it reads as a secret key only its owner may read."""
    if keys.looks_inline(value.strip()):  # a key in the environment would be copied into every child process
        raise BadInput(name, keys.withheld(value.strip()), f"the path of a secret key file (from "
                       f"`{command('cache keygen')}`), not the key itself: a key in the environment would be copied "
                       "into every child process")
    path = parse_path(name, value)
    try:
        keys.read_secret_key(path)
    except keys.KeyProblem as exc:
        raise BadInput(name, value, f"a secret key file written by `{command('cache keygen')}` (mode 600); {exc}"
                       ) from None
    _need(name, value, "a key", ["cryptography"], "signing", f"unset {name}")
    return path


def parse_trusted_keys(name: str, value: str) -> TrustedKeys:
    if not value.strip():
        raise BadInput(name, value, f"{TRUSTED_ALLOWED}; set but empty, it would check no signatures (a `$(cat "
                       "NAME.pub)` that could not read its file gives this): give the .pub file's absolute path (the "
                       "setting reads the file), or leave the setting unset to check none")
    items = value.split()
    shown = " ".join(keys.withheld(item) for item in items)  # a secret pasted here by mistake is never copied
    if _CONTROL.search(value.replace("\t", " ").replace("\n", " ")):
        raise BadInput(name, shown, TRUSTED_ALLOWED)
    lines: List[str] = []
    try:
        for item in items:
            found = [keys.parse_public(item, f"the key {item.partition(':')[0]}")] if keys.looks_inline(item) else \
                keys.read_public_keys(parse_path(name, item))
            lines.extend(key.line() for key in found if key.line() not in lines)
    except keys.KeyProblem as exc:
        raise BadInput(name, shown, f"{TRUSTED_ALLOWED}; {exc}") from None
    _need(name, shown, "a key", ["cryptography"], "signing", f"unset {name}")
    return tuple(lines)


# -- the table ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    """One row of the table: a field of Settings with its variable, flag, parser, help group, help and kind."""

    env: str
    flag: str
    parse: Callable[[str, str], object]
    group: str
    help: str
    kind: str = VALUE
    metavar: str = ""  # a LIST's value in the help
    name: str = ""  # the field's name and default, and whether Request has it: filled in from the dataclasses
    default: object = None
    in_request: bool = False


def _row(env: str, flag: str, parse: Callable[[str, str], object], group: str, help: str, *, default: object = None,
         kind: str = VALUE, metavar: str = "") -> Any:
    row = Setting(env=env, flag=flag, parse=parse, group=group, help=help, kind=kind, metavar=metavar)
    return field(default=default, metadata={"row": row})


@dataclass(frozen=True)
class Request:
    """What a success must satisfy: the settings that change a run's answer, as markers and records carry them."""

    root: str = _row("FLYDSL_ROOT", "--root", parse_root, "root",
                     f"the isolated tree and the env file's home (default {DEFAULT_ROOT})", default=DEFAULT_ROOT)
    min_version: str = _row("FLYDSL_MIN_VERSION", "--min-version", parse_min_version, "import",
                            "reuse floor for flydsl.__version__", default=DEFAULT_MIN_VERSION)
    pin: str = _row("FLYDSL_PIN", "--pin", parse_pin, "build", "the commit (or tag) built when a build is needed",
                    default=DEFAULT_PIN)
    repo: str = _row("FLYDSL_REPO", "--repo", parse_repo, "build", "source repository: URL or mirror path",
                     default=DEFAULT_REPO)
    python: str = _row("FLYDSL_PYTHON", "--python", parse_python, "import", "the interpreter that must import FlyDSL",
                       default="python3")
    require: Tuple[str, ...] = _row("FLYDSL_REQUIRE", "--require", parse_require, "import",
                                    "modules that must import from the one tree", default=DEFAULT_REQUIRE, kind=LIST,
                                    metavar="MODULES")
    strategy: Strategy = _row("FLYDSL_STRATEGY", "--strategy", parse_strategy, "build",
                              "auto, source, release or reuse-only", default=Strategy.AUTO)
    mlir_path: Optional[str] = _row("MLIR_PATH", "--mlir-path", parse_path, "build",
                                    "a ready MLIR install: skip the LLVM build")
    shim_dir: Optional[str] = _row("FLYDSL_SHIM_DIR", "--shim-dir", parse_path, "env file",
                                   "exported to the env file for the vLLM shim")
    vllm_moe: bool = _row("FLYDSL_VLLM_MOE", "--vllm-moe", parse_bool, "env file",
                          "export VLLM_USE_FLYDSL_MOE=1 (--no-vllm-moe: off)", default=True, kind=SWITCH)
    exact_pin: bool = _row("FLYDSL_EXACT_PIN", "--exact-pin", parse_bool, "import",
                           "reuse only a tree built from the pin (default: any one tree whose flydsl passes the floor)",
                           default=False, kind=FLAG)

    def to_json(self) -> Dict[str, object]:
        """Its fields as JSON reads them back (a Settings' all but ``sources``: the detached worker's copy)."""
        data: Dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}
        data.update(require=list(self.require), strategy=self.strategy.value)
        return data

    @classmethod
    def from_json(cls, data: object) -> Optional["Request"]:
        """The request a file records; None unless it has exactly these keys, each value as its parser gives it."""
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(Request)}:
            return None
        try:
            return cls(**{s.name: _read_back(s, data[s.name]) for s in SETTINGS if s.in_request})
        except ValueError:
            return None


def _read_back(row: Setting, value: object) -> Any:
    """A recorded value as its setting holds it; ValueError unless its parser gives it back unchanged."""
    if value is None and row.default is None or isinstance(value, bool) and row.kind in (FLAG, SWITCH):
        return value
    if value and (isinstance(value, str) or isinstance(value, list) and all(isinstance(v, str) for v in value)):
        with contextlib.suppress(BadInput):
            parsed = row.parse("request", flag_text(row.name, value))
            if parsed == (tuple(value) if isinstance(value, list) else value):
                return parsed
    raise ValueError(row.name)


@dataclass(frozen=True)
class Settings(Request):
    """Every setting: the request, and how a run goes about answering it."""

    lock_file: str = _row("FLYDSL_BUILD_LOCK", "--lock-file", parse_written_file, "root",
                          "the build lock (default next to the root)", default="")
    fail_marker: str = _row("FLYDSL_BUILD_FAILED", "--fail-marker", parse_written_file, "root",
                            "failure marker (default next to the root)", default="")
    rocm_path: str = _row("ROCM_PATH", "--rocm-path", parse_path, "build", "ROCm prefix", default="/opt/rocm")
    jobs: Optional[int] = _row("FLYDSL_JOBS", "--jobs", parse_jobs, "build",
                               "build parallelism (default: cores, capped by memory)")
    lock_timeout: Optional[float] = _row("FLYDSL_LOCK_TIMEOUT", "--lock-timeout", parse_lock_timeout, "build",
                                         "seconds to wait for the lock (or a build lease), then exit 7")
    probe_timeout: float = _row("FLYDSL_PROBE_TIMEOUT", "--probe-timeout", parse_probe_timeout, "import",
                                "seconds an import probe may take before it is killed (default 300)",
                                default=DEFAULT_PROBE_TIMEOUT)
    cache: Optional[str] = _row("FLYDSL_CACHE", "--cache", parse_cache, "cache",
                                "binary cache: a folder or an fsspec URL")
    lease_ttl: float = _row("FLYDSL_LEASE_TTL", "--lease-ttl", parse_lease_ttl, "cache",
                            "seconds a build lease in the cache lives without a heartbeat (default 120)", default=120.0)
    verify: bool = _row("FLYDSL_VERIFY", "--verify", parse_bool, "import", "force the full import probe",
                        default=False, kind=FLAG)
    fix_rocm_in_place: bool = _row("FLYDSL_FIX_ROCM_IN_PLACE", "--fix-rocm-in-place", parse_bool, "build",
                                   "fix the hip CMake library name inside ROCM_PATH itself (default: a private "
                                   "corrected copy)", default=False, kind=FLAG)
    git_mirrors: GitMirrors = _row("FLYDSL_GIT_MIRRORS", "--git-mirror", parse_git_mirrors, "build",
                                   "FROM=TO URL prefixes: every git command fetches FROM... from TO... instead",
                                   default=(), kind=LIST, metavar="FROM=TO")
    cache_signing_key: Optional[str] = _row("FLYDSL_CACHE_SIGNING_KEY", "--cache-signing-key", parse_signing_key,
                                            "cache", "secret key file (`cache keygen`): sign every cache entry this "
                                            "run publishes")
    cache_trusted_keys: TrustedKeys = _row("FLYDSL_CACHE_TRUSTED_KEYS", "--cache-trusted-key", parse_trusted_keys,
                                           "cache", "public keys NAME:BASE64 or .pub files: fetch only cache entries "
                                           "one of them signed", default=(), kind=LIST, metavar="KEY")
    store: Optional[str] = _row("FLYDSL_STORE", "--store", parse_store, "store", "the host store roots copy their "
                                "trees from (default: in the user's cache folder; off: none)")
    mlir_url: str = _row("FLYDSL_MLIR_URL", "--mlir-url", parse_mlir_url, "build",
                         "a prebuilt LLVM/MLIR install to build FlyDSL against: triton, a tar.gz URL ({llvm}, {llvm8} "
                         "filled in) or off (default); checked by content, the LLVM build is the fallback",
                         default="off")
    # Where each value came from, for messages: the flag or the variable as the user spelled it.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def label(self, name: str) -> str:
        return self.sources.get(name) or SETTING_BY_NAME[name].env

    @property
    def base_dir(self) -> str:
        """The root's folder: the lock, the markers, the log and the LLVM build live there."""
        return os.path.dirname(self.root)

    @property
    def env_file(self) -> str:
        return layout.env_file(self.root)

    @property
    def env_json(self) -> str:
        return layout.env_json(self.root)

    @property
    def log_file(self) -> str:
        return layout.log_file(self.root)

    def store_folder(self, environ: Mapping[str, str]) -> Optional[str]:
        """The host store: FLYDSL_STORE, else the default in the user's cache folder; None when off or there is none."""
        if self.store == "off":
            return None
        host = layout.host_cache_dir(environ)
        return self.store or (layout.default_store_dir(host) if host is not None else None)

    def request(self) -> Request:
        return Request(**{f.name: getattr(self, f.name) for f in fields(Request)})


SETTINGS: Tuple[Setting, ...] = tuple(
    replace(f.metadata["row"], name=f.name, default=f.default, in_request=f.name in {r.name for r in fields(Request)})
    for f in fields(Settings) if f.metadata)
SETTING_BY_NAME: Dict[str, Setting] = {s.name: s for s in SETTINGS}


# -- reading the settings ---------------------------------------------------------------------------------------
def load_settings(flags: Mapping[str, object], environ: Mapping[str, str]) -> Settings:
    """Settings from flags (the API's keywords or a parsed command line: text or typed values, None when not given)
    and variables; BadInput for the first bad value, TypeError for a name that is no setting."""
    unknown = sorted(set(flags) - set(SETTING_BY_NAME))
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(SETTING_BY_NAME)}")
    values: Dict[str, object] = {}
    sources: Dict[str, str] = {}
    for setting in SETTINGS:
        given, label = flags.get(setting.name), setting.flag
        raw = None if given is None else flag_text(setting.name, given)
        refused = setting.name in EMPTY_REFUSED
        if raw is None:
            raw, label = environ.get(setting.env), setting.env
            if raw is None or (raw == "" and not refused):
                continue  # unset, or an empty variable: the default, as in the bash executor
        elif raw == "" and not refused:
            raise BadInput(label, raw, "a non-empty value (leave the flag out to get the default)")
        values[setting.name] = setting.parse(label, raw)
        sources[setting.name] = label
    root = str(values.get("root", DEFAULT_ROOT))
    values.setdefault("lock_file", layout.default_lock_file(root))
    values.setdefault("fail_marker", layout.default_fail_marker(root))
    settings = Settings(sources=sources, **values)  # type: ignore[arg-type]
    check_path_clashes(settings, environ)
    if settings.git_mirrors:
        git_config_count(environ)  # the mirrors' entries go after the caller's own
    check_host_id(environ)
    return settings


def flag_text(name: str, value: object) -> str:
    """A typed value (an API keyword, a parsed command line) as the text its flag gives."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Mapping):  # the API's {FROM: TO} mirrors: (FROM, TO) pairs, as a list of them gives
        value = list(value.items())
    if not isinstance(value, (list, tuple)):
        return str(value)
    items = [item if isinstance(item, str) else "=".join(str(part) for part in item) for item in value]
    if name == "git_mirrors":  # an empty pair among others is refused like a lone one: shown as "="
        return " ".join(item if item.strip() else "=" for item in items)
    if name == "cache_trusted_keys":  # an empty key among others, or none at all, is set but empty
        return "" if not items or any(not item.strip() for item in items) else " ".join(items)
    return ",".join(items)


def fail_marker_path(flags: Mapping[str, object], environ: Mapping[str, str]) -> Optional[str]:
    """Where the failure marker goes, from the root and marker settings alone (for bad input elsewhere); else None."""
    for names in (("root", "lock_file", "fail_marker"), ("root", "fail_marker")):
        given = {name: flags.get(name) for name in names}
        only = {s.env: environ.get(s.env, "") for s in SETTINGS if s.name in names}
        only.update((k, environ[k]) for k in layout.HOST_VARIABLES if k in environ)  # the host's folder
        try:
            return load_settings(given, only).fail_marker
        except PathClash:
            return None  # writing it would replace another of the tool's files, or a file in the root
        except BadInput:
            continue  # a bad lock file: the marker may still be written
    return None


# -- files at one path ------------------------------------------------------------------------------------------
class PathClash(BadInput):
    """Two of the tool's files at one path, or one in its own folders: a marker over the env file reads as success."""

    def __init__(self, settings: Settings, setting: str, clash: str, allowed: str) -> None:
        label, value = settings.label(setting), getattr(settings, setting)
        super().__init__(label, value, allowed)
        self.reason = f"{label}={value!r} {clash}; allowed: {allowed}"


def check_path_clashes(settings: Settings, environ: Mapping[str, str]) -> None:
    """Refuse two of the tool's files at one path (resolved), or a marker or lock in the root or the tool's folders."""
    def named(setting: str) -> str:
        return f"{settings.label(setting)}={getattr(settings, setting)!r}"

    files = [(setting, what, os.path.realpath(path)) for setting, what, path in (
        ("fail_marker", "", settings.fail_marker), ("lock_file", "", settings.lock_file),
        ("lock_file", "holder record", settings.lock_file + ".holder"), ("root", "env file", settings.env_file),
        ("root", "env file's JSON twin", settings.env_json), ("root", "log", settings.log_file))]
    for (setting, what, path), (other, its, other_path) in itertools.combinations(files, 2):
        if path == other_path:
            why = f"is the same file as {f'the {its} of ' if its else ''}{named(other)}"
            raise PathClash(settings, setting, f"(its {what}) {why}" if what else why, "a path of its own")
    base, record = settings.base_dir, "the tool's record of its LLVM build"
    own = [(layout.base_state_dir(base), "the tool's own folder (run records)"),
           (layout.llvm_dir(base), "the tool's LLVM build"), (layout.llvm_record(base), record),
           (layout.llvm_made_record(base), record)]
    host = layout.host_cache_dir(environ)
    if host is not None:
        own.append((host, "the tool's own folder for this host (ETA history)"))
    folders = [(settings.root, f"{named('root')} (the tool's tree: its files are tracked or the tool's own)",
                "a path outside the root"),
               *((path, f"{path}, {what}", "a path outside the tool's own files") for path, what in own)]
    if settings.cache is not None and not re.match(_URL, settings.cache):
        folders.append((settings.cache, f"{named('cache')} (the binary cache)", "a path outside the cache"))
    for setting, _, path in files[:2]:  # the marker and the lock
        for folder, inside, allowed in folders:
            folder = os.path.realpath(folder).rstrip("/")
            if path == folder or path.startswith(folder + "/"):
                raise PathClash(settings, setting, f"lies inside {inside}", allowed)
