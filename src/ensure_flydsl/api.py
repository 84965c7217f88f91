"""The Python API: ``ensure()`` takes the settings as keyword arguments and returns a Result (or raises an
EnsureError carrying the exit code); ``activate()`` applies a result to this process."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
from typing import Mapping, Optional

from ensure_flydsl.errors import AlreadyImported, EnsureError, ExitCode, Stage
from ensure_flydsl.pipeline.run import ensure as run_or_warm
from ensure_flydsl.probe.gate import imported_elsewhere
from ensure_flydsl.result import Result
from ensure_flydsl.runs.markers import EnvFile
from ensure_flydsl.settings import load_settings
from ensure_flydsl.support.report import Reporter


def ensure(*, environ: Optional[Mapping[str, str]] = None, verbose: bool = False, **settings: object) -> Result:
    """Ensure FlyDSL is importable; return the Result or raise EnsureError (``.code`` is the exit code)."""
    env = dict(os.environ if environ is None else environ)
    # As the command line: nothing the run makes is world-writable, whatever the caller's umask.
    previous = os.umask(0o022)
    os.umask(previous | 0o002)
    try:
        return run_or_warm(load_settings(settings, env), env, Reporter(sys.stderr if verbose else None))[0]
    finally:
        os.umask(previous)


def activate(result: Result) -> None:
    """Apply a result's environment to this process (os.environ and sys.path), once; exit 6, nothing changed, when
    the tree was made for another interpreter's ABI, or (AlreadyImported) flydsl or kernels came from another tree."""
    here = f"{sys.implementation.cache_tag}/{sysconfig.get_config_var('SOABI') or 'none'}/{sysconfig.get_platform()}"
    if result.abi != here:  # its compiled modules cannot load here
        raise EnsureError(ExitCode.PROBE, f"the tree was made for {result.python} ({result.abi}), not for "
                          f"{sys.executable} ({here})", stage=Stage.ACTIVATE, hint="ensure(python=sys.executable)")
    if (conflict := imported_elsewhere(result.files)) is not None:
        raise AlreadyImported(*conflict)
    # From the PYTHONPATH as it is now (what sourcing the env file now would give), not the one ensure() saw.
    EnvFile.of_result(result).apply(os.environ, sys.path)
    importlib.invalidate_caches()  # a folder on the path before the build made it is cached as absent
