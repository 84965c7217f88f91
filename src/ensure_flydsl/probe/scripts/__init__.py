"""The scripts the tool runs inside another interpreter (``python -c TEXT``), as files ruff and mypy check.

They are never imported: each runs in the target interpreter (any CPython 3.6+), so each is
dependency-free and version-neutral (no ``from __future__ import annotations``, no syntax newer than 3.6).
:func:`text` reads one for ``-c``; ``-c`` (not the file's path) keeps the script's folder off the target's
``sys.path``.
"""

from __future__ import annotations

import functools
import os


@functools.lru_cache(maxsize=None)
def text(name: str) -> str:
    """The source of the script ``name`` (``import_probe``, ``find_modules``, ``nanobind``, ``has_pip``)."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py"), encoding="utf-8") as f:
        return f.read()
