"""Settings: one frozen record, read from flags and environment variables and validated without I/O.

A flag wins over its variable; an empty variable means the default (as in the bash executor,
ensure_flydsl.sh), except for the settings in :data:`EMPTY_REFUSED`; an empty flag value is refused.  Every
refusal is a :class:`BadInput` (exit 64) naming the setting as the user spelled it (``--jobs`` or
``FLYDSL_JOBS``), the value, and what is allowed.  The one
look at the file system here resolves symlinks, so that two path settings that name one file are refused
before any command writes it; checks that need more (the interpreter runs, the root is ours) live in
:func:`ensure_flydsl.pipeline.decide.preflight`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ensure_flydsl import layout
from ensure_flydsl.errors import BadInput
from ensure_flydsl.setting_values import (
    STRATEGIES,
    GitMirrors,
    Strategy,
    check_host_id,
    git_config_count,
    parse_bool,
    parse_cache,
    parse_git_mirrors,
    parse_jobs,
    parse_lease_ttl,
    parse_lock_timeout,
    parse_min_version,
    parse_pin,
    parse_plain_path,
    parse_probe_timeout,
    parse_python,
    parse_repo,
    parse_require,
    parse_root,
    parse_store,
    parse_strategy,
    parse_written_file,
)
from ensure_flydsl.settings_table import (
    DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL,
)
from ensure_flydsl.settings_table import (
    DEFAULT_MIN_VERSION as DEFAULT_MIN_VERSION,
)
from ensure_flydsl.settings_table import (
    DEFAULT_PIN as DEFAULT_PIN,
)
from ensure_flydsl.settings_table import (
    DEFAULT_PROBE_TIMEOUT as DEFAULT_PROBE_TIMEOUT,
)
from ensure_flydsl.settings_table import (
    DEFAULT_PYTHON as DEFAULT_PYTHON,
)
from ensure_flydsl.settings_table import (
    DEFAULT_REPO as DEFAULT_REPO,
)
from ensure_flydsl.settings_table import (
    DEFAULT_REQUIRE as DEFAULT_REQUIRE,
)
from ensure_flydsl.settings_table import (
    DEFAULT_ROCM_PATH as DEFAULT_ROCM_PATH,
)
from ensure_flydsl.settings_table import (  # the table's names, as they were imported from here
    DEFAULT_ROOT as DEFAULT_ROOT,
)
from ensure_flydsl.settings_table import (
    EMPTY_REFUSED as EMPTY_REFUSED,
)
from ensure_flydsl.settings_table import (
    FLAG as FLAG,
)
from ensure_flydsl.settings_table import (
    LIST as LIST,
)
from ensure_flydsl.settings_table import (
    SETTING_BY_NAME as SETTING_BY_NAME,
)
from ensure_flydsl.settings_table import (
    SETTING_GROUPS as SETTING_GROUPS,
)
from ensure_flydsl.settings_table import (
    SETTINGS as SETTINGS,
)
from ensure_flydsl.settings_table import (
    SWITCH as SWITCH,
)
from ensure_flydsl.settings_table import (
    VALUE as VALUE,
)
from ensure_flydsl.settings_table import (
    Request as Request,
)
from ensure_flydsl.settings_table import (
    Setting as Setting,
)
from ensure_flydsl.settings_table import (
    TrustedKeys as TrustedKeys,
)
from ensure_flydsl.settings_table import (
    parse_signing_key as parse_signing_key,
)
from ensure_flydsl.settings_table import (
    parse_trusted_keys as parse_trusted_keys,
)


@dataclass(frozen=True)
class Settings:
    root: str = DEFAULT_ROOT
    min_version: str = DEFAULT_MIN_VERSION
    pin: str = DEFAULT_PIN
    repo: str = DEFAULT_REPO
    lock_file: str = ""
    fail_marker: str = ""
    rocm_path: str = DEFAULT_ROCM_PATH
    mlir_path: Optional[str] = None
    python: str = DEFAULT_PYTHON
    shim_dir: Optional[str] = None
    vllm_moe: bool = True
    require: Tuple[str, ...] = DEFAULT_REQUIRE
    strategy: Strategy = Strategy.AUTO
    jobs: Optional[int] = None
    lock_timeout: Optional[float] = None
    probe_timeout: float = DEFAULT_PROBE_TIMEOUT
    cache: Optional[str] = None
    lease_ttl: float = DEFAULT_LEASE_TTL
    verify: bool = False
    fix_rocm_in_place: bool = False
    git_mirrors: GitMirrors = ()
    exact_pin: bool = False
    cache_signing_key: Optional[str] = None
    cache_trusted_keys: TrustedKeys = ()
    store: Optional[str] = None  # None: the default under the user's cache folder; "off": no store
    # Where each value came from, for messages: the flag or the variable as the user spelled it.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def label(self, name: str) -> str:
        return self.sources.get(name) or SETTING_BY_NAME[name].env

    @property
    def base_dir(self) -> str:
        """The folder holding the root: home of the lock, the markers, the log and build_llvm.sh's tree."""
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

    def request(self) -> Request:
        """What a success marker must satisfy: everything that changes the answer of a run."""
        return Request(root=self.root, min_version=self.min_version, pin=self.pin, repo=self.repo, python=self.python,
                       require=self.require, strategy=self.strategy, mlir_path=self.mlir_path,
                       shim_dir=self.shim_dir, vllm_moe=self.vllm_moe, exact_pin=self.exact_pin)


_PARSERS: Dict[str, Callable[[str, str], object]] = {
    "root": parse_root,
    "min_version": parse_min_version,
    "pin": parse_pin,
    "repo": parse_repo,
    "lock_file": parse_written_file,
    "fail_marker": parse_written_file,
    "rocm_path": parse_plain_path,
    "mlir_path": parse_plain_path,
    "python": parse_python,
    "shim_dir": parse_plain_path,
    "vllm_moe": parse_bool,
    "require": parse_require,
    "strategy": parse_strategy,
    "jobs": parse_jobs,
    "lock_timeout": parse_lock_timeout,
    "probe_timeout": parse_probe_timeout,
    "cache": parse_cache,
    "lease_ttl": parse_lease_ttl,
    "verify": parse_bool,
    "fix_rocm_in_place": parse_bool,
    "git_mirrors": parse_git_mirrors,
    "exact_pin": parse_bool,
    "cache_signing_key": parse_signing_key,
    "cache_trusted_keys": parse_trusted_keys,
    "store": parse_store,
}


class PathClash(BadInput):
    """Two files of the tool at one path, or a file the tool writes inside the root: refused before either
    is written, since one would replace the other (a failure marker over the env file reads as success)."""

    def __init__(self, setting: str, value: str, clash: str, allowed: str) -> None:
        super().__init__(setting, value, allowed)
        self.reason = f"{setting}={value!r} {clash}; allowed: {allowed}"


def _own_files(settings: Settings) -> List[Tuple[str, str, str]]:
    """(setting, what, path) of every file the tool writes at a fixed path; what "" is the setting's own."""
    return [
        ("fail_marker", "", settings.fail_marker),
        ("lock_file", "", settings.lock_file),
        ("lock_file", "holder record", settings.lock_file + ".holder"),
        ("root", "env file", settings.env_file),
        ("root", "env file's JSON twin", settings.env_json),
        ("root", "log", settings.log_file),
    ]


def check_path_clashes(settings: Settings, environ: Mapping[str, str]) -> None:
    """The failure marker, the lock (and its holder record), the env file, its twin and the log are
    pairwise different files, and the marker and the lock lie outside the root (whose files are tracked
    or the tool's).  Paths are compared resolved, so a symlink to another of them counts as that file."""
    def text(setting: str, what: str = "") -> str:
        named = f"{settings.label(setting)}={getattr(settings, setting)!r}"
        return f"the {what} of {named}" if what else named

    files = _own_files(settings)
    real = [os.path.realpath(path) for _, _, path in files]
    for i, (setting, what, _) in enumerate(files):
        for j in range(i + 1, len(files)):
            if real[i] == real[j]:
                clash = f"is the same file as {text(*files[j][:2])}"
                if what:
                    clash = f"(its {what}) {clash}"
                raise PathClash(settings.label(setting), getattr(settings, setting), clash, "a path of its own")
    # Each path resolved once (the warm call's settings pay for every lstat of realpath).
    folders = [(os.path.realpath(folder), what, allowed) for folder, what, allowed in _own_folders(settings, text,
                                                                                                     environ)]
    for (setting, what, _), path in zip(files, real):
        if not what and setting in ("fail_marker", "lock_file"):
            for folder, inside, allowed in folders:
                if _inside(path, folder):
                    raise PathClash(settings.label(setting), getattr(settings, setting), f"lies inside {inside}",
                                    allowed)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _own_folders(settings: Settings, text: Callable[..., str],
                 environ: Mapping[str, str]) -> List[Tuple[str, str, str]]:
    """(folder, what it is, what is allowed) of the folders whose files are the root's or the tool's own: a
    marker or a lock in one would overwrite, or be deleted with, a file the tool reads back (run records, the
    host's ETA history, the cache's entries, the LLVM build and its records)."""
    base = settings.base_dir
    own = "a path outside the tool's own files"
    folders = [
        (settings.root, f"{text('root')} (the tool's tree: its files are tracked or the tool's own)",
         "a path outside the root"),
        (layout.base_state_dir(base), f"{layout.base_state_dir(base)}, the tool's own folder (run records)", own),
        (layout.llvm_dir(base), f"{layout.llvm_dir(base)}, the tool's LLVM build", own),
        (layout.llvm_record(base), f"{layout.llvm_record(base)}, the tool's record of its LLVM build", own),
        (layout.llvm_made_record(base), f"{layout.llvm_made_record(base)}, the tool's record of its LLVM build",
         own),
    ]
    host = layout.host_cache_dir(environ)
    if host is not None:
        folders.append((host, f"{host}, the tool's own folder for this host (ETA history)", own))
    if settings.cache is not None:
        if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", settings.cache):
            folders.append((settings.cache, f"{text('cache')} (the binary cache)", "a path outside the cache"))
    return folders


def load_settings(
    flags: Mapping[str, Optional[str]],
    environ: Mapping[str, str],
) -> Settings:
    """Combine flags (already strings, None when not given) and environment variables into Settings.

    ``flags`` maps a setting's name to the raw flag value; ``require`` may hold several values joined by
    commas.  Raises BadInput for the first bad value, naming the flag or the variable it came from.
    """
    values: Dict[str, object] = {}
    sources: Dict[str, str] = {}
    for setting in SETTINGS:
        raw = flags.get(setting.name)
        refused = setting.name in EMPTY_REFUSED
        if raw is not None:
            label = setting.flag
            if raw == "" and not refused:
                raise BadInput(label, raw, "a non-empty value (leave the flag out to get the default)")
        else:
            raw = environ.get(setting.env)
            label = setting.env
            if raw is None or (raw == "" and not refused):
                continue  # unset, or an empty variable: the default, as in the bash executor
        values[setting.name] = _PARSERS[setting.name](label, raw)
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


def fail_marker_path(flags: Mapping[str, Optional[str]], environ: Mapping[str, str]) -> Optional[str]:
    """Where the failure marker goes, worked out from the root and marker settings alone, so that bad
    input elsewhere can still be reported to a poller.  None when those settings are bad themselves."""
    def partial(names: Tuple[str, ...]) -> str:
        given = {name: flags.get(name) for name in names}
        only = {s.env: environ.get(s.env, "") for s in SETTINGS if s.name in names}
        only.update((k, environ[k]) for k in layout.HOST_VARIABLES if k in environ)  # the host's folder
        return load_settings(given, only).fail_marker

    try:
        return partial(("root", "lock_file", "fail_marker"))
    except PathClash:
        return None  # writing it would replace another of the tool's files, or a file in the root
    except BadInput:
        pass  # a bad lock file: the marker may still be written
    try:
        return partial(("root", "fail_marker"))
    except BadInput:
        return None


def settings_from_kwargs(kwargs: Mapping[str, object], environ: Mapping[str, str]) -> Settings:
    """The Python API's keyword arguments, validated exactly like flags (values may be typed)."""
    unknown = sorted(set(kwargs) - set(SETTING_BY_NAME))
    if unknown:
        raise TypeError(f"unknown setting(s): {', '.join(unknown)}; known: {', '.join(SETTING_BY_NAME)}")
    flags: Dict[str, Optional[str]] = {}
    for key, value in kwargs.items():
        if value is None:
            continue
        if isinstance(value, bool):
            flags[key] = "1" if value else "0"
        elif key == "git_mirrors" and not isinstance(value, str):
            flags[key] = join_git_mirrors(value)
        elif key == "cache_trusted_keys" and isinstance(value, (list, tuple)):
            flags[key] = join_trusted_keys([str(v) for v in value])
        elif isinstance(value, (list, tuple)):
            flags[key] = ",".join(str(v) for v in value)
        else:
            flags[key] = str(value)
    return load_settings(flags, environ)


def join_require(values: Optional[List[str]]) -> Optional[str]:
    """``--require`` is repeatable; each value may itself be comma-separated."""
    if values is None:
        return None
    return ",".join(values)


def join_trusted_keys(values: Optional[List[str]]) -> Optional[str]:
    """``--cache-trusted-key`` is repeatable (each a key or a .pub file); an empty one among them, or an empty
    list from the Python API, is the empty value, which the parser refuses (set but empty)."""
    if values is None:
        return None
    return "" if not values or any(not item.strip() for item in values) else " ".join(values)


def join_git_mirrors(values: object) -> Optional[str]:
    """``--git-mirror`` is repeatable; the Python API also takes {FROM: TO} or (FROM, TO) pairs."""
    if values is None:
        return None

    if isinstance(values, Mapping):
        values = [f"{source}={to}" for source, to in values.items()]
    if isinstance(values, (list, tuple)):
        items = [item if isinstance(item, str) else "=".join(str(part) for part in item) for item in values]
        # an empty one among others is refused like a lone empty one: shown as the empty pair "="
        return " ".join(item if item.strip() else "=" for item in items)
    return str(values)


__all__ = [
    "DEFAULT_MIN_VERSION",
    "DEFAULT_PIN",
    "DEFAULT_REPO",
    "DEFAULT_ROOT",
    "SETTINGS",
    "STRATEGIES",
    "Setting",
    "Settings",
    "load_settings",
    "settings_from_kwargs",
]
