"""The settings table: each setting's keyword, variable, flag, help and kind (how its flag is given), their
defaults, and the groups the help shows them in.  The parser (cli/parser.py), the help, the settings record
(settings.py) and docs/reference.md are made from it.  Also the request (:class:`Request`): the settings that
change a run's answer, as the env file's twin, the fingerprint, the failure marker and the run records carry
them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Callable, Dict, Optional, Tuple

from ensure_flydsl.errors import BadInput
from ensure_flydsl.setting_values import (
    STRATEGIES,
    Strategy,
    parse_min_version,
    parse_pin,
    parse_plain_path,
    parse_python,
    parse_repo,
    parse_require,
    parse_root,
)
from ensure_flydsl.signing_keys import parse_signing_key as parse_signing_key
from ensure_flydsl.signing_keys import parse_trusted_keys as parse_trusted_keys
from ensure_flydsl.warm import DEFAULT_ROOT as DEFAULT_ROOT

DEFAULT_MIN_VERSION = "0.2.2"
DEFAULT_PIN = "a35627a2fef0a5a70c63536c4174674223866737"
DEFAULT_REPO = "https://github.com/ROCm/FlyDSL.git"
DEFAULT_ROCM_PATH = "/opt/rocm"
DEFAULT_PYTHON = "python3"
DEFAULT_REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")
DEFAULT_PROBE_TIMEOUT = 300.0
DEFAULT_LEASE_TTL = 120.0
# FLYDSL_CACHE_TRUSTED_KEYS, each key as its public line "NAME:BASE64" (signing_keys.py reads and checks them).
TrustedKeys = Tuple[str, ...]
# Settings whose empty (or blank) value is bad input, not the default: its parser says why.  Trusted keys set
# but empty (`FLYDSL_CACHE_TRUSTED_KEYS="$(cat ci.pub)"` run where ci.pub is not) would turn checks off.
EMPTY_REFUSED = frozenset({"cache_trusted_keys"})



VALUE, FLAG, LIST, SWITCH = "value", "flag", "list", "switch"  # a setting's kind: how its flag is given


@dataclass(frozen=True)
class Setting:
    """One row of the settings table (the README's).  ``kind`` is how the flag is given: VALUE (``--root X``),
    FLAG (``--verify``: no value), LIST (repeatable, ``--require A --require B``) or SWITCH (``--vllm-moe`` and
    ``--no-vllm-moe``); ``metavar`` names a LIST's value."""

    name: str  # the keyword of Settings and of ensure_flydsl.ensure()
    env: str
    flag: str
    help: str
    kind: str = VALUE
    metavar: str = ""


SETTINGS: Tuple[Setting, ...] = (
    Setting("root", "FLYDSL_ROOT", "--root", f"the isolated tree and the env file's home (default {DEFAULT_ROOT})"),
    Setting("min_version", "FLYDSL_MIN_VERSION", "--min-version", "reuse floor for flydsl.__version__"),
    Setting("pin", "FLYDSL_PIN", "--pin", "the commit (or tag) built when a build is needed"),
    Setting("repo", "FLYDSL_REPO", "--repo", "source repository: URL or mirror path"),
    Setting("lock_file", "FLYDSL_BUILD_LOCK", "--lock-file", "the build lock (default next to the root)"),
    Setting("fail_marker", "FLYDSL_BUILD_FAILED", "--fail-marker", "failure marker (default next to the root)"),
    Setting("rocm_path", "ROCM_PATH", "--rocm-path", "ROCm prefix"),
    Setting("mlir_path", "MLIR_PATH", "--mlir-path", "a ready MLIR install: skip the LLVM build"),
    Setting("python", "FLYDSL_PYTHON", "--python", "the interpreter that must import FlyDSL"),
    Setting("shim_dir", "FLYDSL_SHIM_DIR", "--shim-dir", "exported to the env file for the vLLM shim"),
    Setting(name="vllm_moe", env="FLYDSL_VLLM_MOE", flag="--vllm-moe",
            help="export VLLM_USE_FLYDSL_MOE=1 (--no-vllm-moe: off)",
            kind=SWITCH),
    Setting(name="require", env="FLYDSL_REQUIRE", flag="--require", help="modules that must import from the one tree",
            kind=LIST, metavar="MODULES"),
    Setting("strategy", "FLYDSL_STRATEGY", "--strategy", "auto, source, release or reuse-only"),
    Setting("jobs", "FLYDSL_JOBS", "--jobs", "build parallelism (default: cores, capped by memory)"),
    Setting("lock_timeout", "FLYDSL_LOCK_TIMEOUT", "--lock-timeout",
            "seconds to wait for the lock (or a build lease), then exit 7"),
    Setting("probe_timeout", "FLYDSL_PROBE_TIMEOUT", "--probe-timeout",
            "seconds an import probe may take before it is killed (default 300)"),
    Setting("cache", "FLYDSL_CACHE", "--cache", "binary cache: a folder or an fsspec URL"),
    Setting("lease_ttl", "FLYDSL_LEASE_TTL", "--lease-ttl",
            "seconds a build lease in the cache lives without a heartbeat (default 120)"),
    Setting(name="verify", env="FLYDSL_VERIFY", flag="--verify", help="force the full import probe", kind=FLAG),
    Setting(name="fix_rocm_in_place", env="FLYDSL_FIX_ROCM_IN_PLACE", flag="--fix-rocm-in-place",
            help="fix the hip CMake library name inside ROCM_PATH itself (default: a private corrected copy)",
            kind=FLAG),
    Setting(name="git_mirrors", env="FLYDSL_GIT_MIRRORS", flag="--git-mirror",
            help="FROM=TO URL prefixes: every git command fetches FROM... from TO... instead", kind=LIST,
            metavar="FROM=TO"),
    Setting(name="exact_pin", env="FLYDSL_EXACT_PIN", flag="--exact-pin",
            help="reuse only a tree built from the pin (default: any one tree whose flydsl passes the floor)",
            kind=FLAG),
    Setting("cache_signing_key", "FLYDSL_CACHE_SIGNING_KEY", "--cache-signing-key",
            "secret key file (`cache keygen`): sign every cache entry this run publishes"),
    Setting(name="cache_trusted_keys", env="FLYDSL_CACHE_TRUSTED_KEYS", flag="--cache-trusted-key",
            help="public keys NAME:BASE64 or .pub files: fetch only cache entries one of them signed", kind=LIST,
            metavar="KEY"),
    Setting("store", "FLYDSL_STORE", "--store",
            "the host store roots link their trees from (default: in the user's cache folder; off: none)"),
)
SETTING_BY_NAME: Dict[str, Setting] = {s.name: s for s in SETTINGS}
# The settings by concern, for the help (cli/help.py): (short name, title, settings).  A setting named in no
# group is shown under "other", so a new row is never left out of the help.
SETTING_GROUPS: Tuple[Tuple[str, str, Tuple[str, ...]], ...] = (
    ("root", "the root and the files beside it", ("root", "lock_file", "fail_marker")),
    ("import", "what must import, and how it is checked",
     ("python", "require", "min_version", "exact_pin", "verify", "probe_timeout")),
    ("build", "what is provisioned when nothing is reused, and how",
     ("pin", "repo", "strategy", "git_mirrors", "jobs", "lock_timeout", "rocm_path", "mlir_path",
      "fix_rocm_in_place")),
    ("env file", "what the env file exports besides the tree", ("shim_dir", "vllm_moe")),
    ("cache", "the binary cache shared between hosts",
     ("cache", "lease_ttl", "cache_signing_key", "cache_trusted_keys")),
    ("store", "the host store the roots of this host link their trees from", ("store",)),
)


@dataclass(frozen=True)
class Request:
    """What a success must satisfy: every setting that changes the answer of a run (``Settings.request()``),
    one record wherever it travels (the env file's JSON twin and its fingerprint, the failure marker, the run
    records), compared by equality.  Its JSON is an object of these eleven keys, ``require`` a list and
    ``strategy`` the strategy's value."""

    root: str
    min_version: str
    pin: str
    repo: str
    python: str
    require: Tuple[str, ...]
    strategy: Strategy
    mlir_path: Optional[str]
    shim_dir: Optional[str]
    vllm_moe: bool
    exact_pin: bool

    def to_json(self) -> Dict[str, object]:
        data = asdict(self)
        data.update(require=list(self.require), strategy=self.strategy.value)
        return data

    @classmethod
    def from_json(cls, data: object) -> Optional["Request"]:
        """The request a file records, or None when it is not one a run of this version writes: exactly its
        keys, and each value one the setting's own parser gives back unchanged (the root, the interpreter, a
        local repository and the paths absolute as the settings make them, the pin a pin, the floor a
        version, the modules module names, the strategy one of :class:`Strategy`), the switches booleans."""
        if not isinstance(data, dict) or set(data) != _REQUEST_KEYS:
            return None
        require = data["require"]
        if not isinstance(require, list) or not all(isinstance(m, str) for m in require) or not _parses_to(
                parse_require, ",".join(require), tuple(require)):
            return None
        strategy, switches = data["strategy"], (data["vllm_moe"], data["exact_pin"])
        if strategy not in STRATEGIES or not all(isinstance(v, bool) for v in switches):
            return None
        checks: Tuple[Tuple[str, Callable[[str, str], object]], ...] = (
            ("root", parse_root), ("min_version", _parse_floor), ("pin", parse_pin), ("repo", parse_repo),
            ("python", parse_python))
        if not all(_parses_to(parse, data[name], data[name]) for name, parse in checks):
            return None
        if not all(data[name] is None or _parses_to(parse_plain_path, data[name], data[name])
                   for name in ("mlir_path", "shim_dir")):
            return None
        return cls(root=data["root"], min_version=data["min_version"], pin=data["pin"], repo=data["repo"],
                   python=data["python"], require=tuple(require), strategy=Strategy(strategy),
                   mlir_path=data["mlir_path"], shim_dir=data["shim_dir"], vllm_moe=switches[0],
                   exact_pin=switches[1])


_REQUEST_KEYS = frozenset(f.name for f in fields(Request))


def _parses_to(parse: Callable[[str, str], object], value: object, expected: object) -> bool:
    """Whether ``value`` is a text the setting's parser accepts and makes ``expected`` of (never empty: an
    empty variable is the default, an empty flag refused)."""
    if not isinstance(value, str) or not value:
        return False
    try:
        return parse("request", value) == expected
    except BadInput:
        return False


def _parse_floor(name: str, value: str) -> str:
    """The floor, as ``parse_min_version`` takes it; a plain release (0.2.2, the default) without importing
    ``packaging``, which the warm call does not otherwise need."""
    parts = value.split(".")
    if all(part.isdigit() and part.isascii() for part in parts):
        return value
    return parse_min_version(name, value)
