"""The scripts the tool runs in the target interpreter (``python -c TEXT``: their folder stays off ``sys.path``),
as files ruff and mypy check; never imported: each runs on any CPython 3.6+, dependency-free."""

from __future__ import annotations

import functools
from importlib import resources

# `python -c` puts "" (the caller's folder) first on sys.path: off it first, so no file there shadows a module.
_PREAMBLE = 'import sys\nif sys.path and sys.path[0] == "":\n    del sys.path[0]\n'


@functools.lru_cache(maxsize=None)
def text(name: str) -> str:
    # Through importlib.resources: the GEAK folder runs the tool from inside a zipapp.
    return _PREAMBLE + (resources.files(__name__) / (name + ".py")).read_text(encoding="utf-8")
