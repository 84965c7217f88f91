"""ensure-flydsl: make ``import flydsl, kernels.moe_gemm_2stage`` work from one consistent tree.

The Python API mirrors the command line::

    import ensure_flydsl
    result = ensure_flydsl.ensure(root="/opt/flydsl/FlyDSL", min_version="0.2.2")
    ensure_flydsl.activate(result)   # os.environ and sys.path, for in-process callers

``ensure`` takes the settings of the README's table as keyword arguments (unset ones come from the environment, as
for the command) and returns a :class:`Result`, or raises :class:`EnsureError` carrying the exit code.
"""

from __future__ import annotations

import os
import sys

from ensure_flydsl.errors import AlreadyImported, BadInput, EnsureError
from ensure_flydsl.version import __version__

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Mapping, Optional

    from ensure_flydsl.result import Result
    from ensure_flydsl.stages import ExitCode as ExitCode


def __getattr__(name: str) -> object:
    """``ensure_flydsl.ExitCode``, built at its first use (PEP 562): every call of the tool imports this
    package, and the warm call uses no exit code of the table (errors.py)."""
    if name == "ExitCode":
        from ensure_flydsl.stages import ExitCode

        return ExitCode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ensure(*, environ: Optional[Mapping[str, str]] = None, verbose: bool = False, **settings: object) -> "Result":
    """Ensure FlyDSL is importable; return the Result or raise EnsureError (``.code`` is the exit code)."""
    from ensure_flydsl.pipeline.run import Run, ensure_run
    from ensure_flydsl.pipeline.warm import try_warm
    from ensure_flydsl.settings import settings_from_kwargs
    from ensure_flydsl.support.report import Reporter

    env = dict(os.environ if environ is None else environ)
    parsed = settings_from_kwargs(settings, env)
    # As in cli.main: nothing the run makes is world-writable, whatever the caller's umask.
    previous = os.umask(0o022)
    os.umask(previous | 0o002)
    try:
        warm = None if parsed.verify else try_warm(parsed, env)
        return warm or ensure_run(Run(parsed, Reporter(sys.stderr if verbose else None), env))
    finally:
        os.umask(previous)


def activate(result: "Result") -> None:
    """Apply a result's environment to this process: os.environ, and sys.path for imports from now on.

    Idempotent: the tree's folders end up first on sys.path and PYTHONPATH, once.  Raises
    :class:`AlreadyImported` (an EnsureError, code 6) and changes nothing when flydsl or kernels were
    already imported from another tree: those modules would stay, mixing two trees.
    """
    from ensure_flydsl.activation import activate as apply

    apply(result)


__all__ = ["AlreadyImported", "BadInput", "EnsureError", "ExitCode", "__version__", "activate", "ensure"]
