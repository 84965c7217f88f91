"""Ask the target interpreter, in a subprocess, what it imports and from where.

FlyDSL is never imported into the tool's own process: the tool may run under another Python, and an
import would pin whatever tree it found for the life of the process.  The probe runs with the tree's
folders prepended to PYTHONPATH exactly as the env file will do, from a neutral working directory and
without the script folder on sys.path, so what it sees is what the workflow will see after ``source``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode

PROBE_TIMEOUT_S = 600.0

# Runs inside the target interpreter (any CPython 3.6+): keep it dependency-free and version-neutral.
_PROBE_SCRIPT = r"""
import json, os, sys, sysconfig, site, traceback, importlib
out = os.dup(1)
os.dup2(2, 1)  # whatever the imports print goes to stderr; fd `out` carries only our JSON
sys.stdout = sys.stderr
if sys.path and sys.path[0] in ("", os.getcwd()):
    del sys.path[0]
modules = json.loads(sys.argv[1])
try:
    site_dirs = list(site.getsitepackages())
except Exception:
    site_dirs = []
try:
    site_dirs.append(site.getusersitepackages())
except Exception:
    pass
info = {
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "implementation": sys.implementation.name,
    "cache_tag": sys.implementation.cache_tag,
    "soabi": sysconfig.get_config_var("SOABI") or "",
    "platform": sysconfig.get_platform(),
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "site_dirs": site_dirs,
    "stdlib": sysconfig.get_paths().get("stdlib", ""),
    "include": sysconfig.get_paths().get("include", ""),
}
results = {}
for name in modules:
    entry = {"file": None, "error": None}
    try:
        mod = importlib.import_module(name)
        entry["file"] = getattr(mod, "__file__", None)
        if entry["file"] is None:
            entry["error"] = "imported as a namespace package without a file (no __init__.py)"
    except BaseException as exc:
        entry["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[-1]
    results[name] = entry
version = None
version_error = None
if "flydsl" in sys.modules:
    version = getattr(sys.modules["flydsl"], "__version__", None)
    if version is not None and not isinstance(version, str):
        version_error = "flydsl.__version__ is not a string: %r" % (version,)
        version = None
    elif version is None:
        version_error = "flydsl has no __version__"
payload = {"python": info, "modules": results, "version": version, "version_error": version_error}
os.write(out, json.dumps(payload).encode())
os.close(out)
"""


@dataclasses.dataclass(frozen=True)
class Interpreter:
    executable: str
    version: str
    implementation: str
    cache_tag: str
    soabi: str
    platform: str
    prefix: str
    base_prefix: str
    site_dirs: Tuple[str, ...]
    stdlib: str
    include: str

    @property
    def abi(self) -> str:
        """What a compiled FlyDSL depends on: implementation, version and ABI tag, platform."""
        return f"{self.cache_tag}/{self.soabi or 'none'}/{self.platform}"

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> "Interpreter":
        return cls(
            executable=str(data["executable"]),
            version=str(data["version"]),
            implementation=str(data["implementation"]),
            cache_tag=str(data["cache_tag"]),
            soabi=str(data.get("soabi") or ""),
            platform=str(data["platform"]),
            prefix=str(data["prefix"]),
            base_prefix=str(data["base_prefix"]),
            site_dirs=tuple(str(d) for d in _as_list(data.get("site_dirs"))),
            stdlib=str(data.get("stdlib") or ""),
            include=str(data.get("include") or ""),
        )


def _as_list(value: object) -> List[object]:
    return list(value) if isinstance(value, (list, tuple)) else []


@dataclasses.dataclass(frozen=True)
class ModuleResult:
    name: str
    file: Optional[str]
    error: Optional[str]


@dataclasses.dataclass(frozen=True)
class Probe:
    interpreter: Interpreter
    modules: Tuple[ModuleResult, ...]
    version: Optional[str]
    version_error: Optional[str]
    pythonpath: str  # the PYTHONPATH the probe ran with
    seconds: float

    def module(self, name: str) -> ModuleResult:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> Dict[str, object]:
        return {
            "python": dataclasses.asdict(self.interpreter),
            "modules": {m.name: {"file": m.file, "error": m.error} for m in self.modules},
            "version": self.version,
            "version_error": self.version_error,
            "pythonpath": self.pythonpath,
            "seconds": round(self.seconds, 3),
        }


def joined_pythonpath(prefix: Sequence[str], caller: Optional[str]) -> str:
    """The tree's folders first, then the caller's PYTHONPATH: what the env file exports."""
    parts = list(prefix)
    if caller:
        parts.append(caller)
    return os.pathsep.join(parts)


def probe_modules(modules: Sequence[str]) -> List[str]:
    """flydsl is always probed (its __version__ gates reuse), then each required module once."""
    ordered = ["flydsl"]
    for m in modules:
        if m not in ordered:
            ordered.append(m)
    return ordered


def run_probe(
    python: str,
    *,
    modules: Sequence[str],
    prefix: Sequence[str] = (),
    environ: Optional[Mapping[str, str]] = None,
    timeout: float = PROBE_TIMEOUT_S,
) -> Probe:
    """Run the probe in ``python`` and return what it saw; raise EnsureError if the probe itself breaks."""
    import time

    env = dict(os.environ if environ is None else environ)
    pythonpath = joined_pythonpath(prefix, env.get("PYTHONPATH"))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    else:
        env.pop("PYTHONPATH", None)
    # Keep probed trees byte-for-byte as they were: no __pycache__ written into them by us.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE_SCRIPT, json.dumps(list(modules))],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise EnsureError(
            ExitCode.BAD_INPUT,
            f"the interpreter {python!r} does not exist",
            stage="probe",
            hint="set FLYDSL_PYTHON (or --python) to the interpreter that will import FlyDSL",
        ) from None
    except PermissionError:
        raise EnsureError(ExitCode.BAD_INPUT, f"the interpreter {python!r} is not executable", stage="probe") from None
    except subprocess.TimeoutExpired:
        raise EnsureError(
            ExitCode.PROBE,
            f"the import probe in {python} did not finish within {timeout:.0f} s",
            stage="probe",
            hint="an import hangs; run `ensure-flydsl verify` by hand to see which",
        ) from None
    seconds = time.monotonic() - started
    try:
        data = json.loads(proc.stdout.decode())
        interpreter = Interpreter.from_json(data["python"])
    except (ValueError, KeyError, TypeError):
        stderr = proc.stderr.decode(errors="replace").strip()
        raise EnsureError(
            ExitCode.PROBE,
            f"the import probe in {python} crashed (exit {proc.returncode}) before it could report",
            stage="probe",
            hint="the interpreter or one of its imports aborts the process; run it by hand",
            detail="\n".join(stderr.splitlines()[-20:]),
        ) from None
    results = tuple(
        ModuleResult(name, entry.get("file"), entry.get("error")) for name, entry in data["modules"].items()
    )
    return Probe(interpreter, results, data.get("version"), data.get("version_error"), pythonpath, seconds)


def describe_interpreter(python: str, environ: Optional[Mapping[str, str]] = None) -> Interpreter:
    """The interpreter's identity alone (no imports): quick enough for validating FLYDSL_PYTHON."""
    return run_probe(python, modules=(), environ=environ, timeout=60.0).interpreter
