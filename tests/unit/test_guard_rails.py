"""Rules of the code that no linter here checks: a private name stays in its module.

ruff's PLC2701 (import-private-name) ignores imports within the same package, which is every import here.
"""

from __future__ import annotations

import ast
import os
from typing import Iterator, List

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKED = ("src", "benchmarks", os.path.join("docs", "reliability_figures.py"))


def _python_files() -> Iterator[str]:
    for name in CHECKED:
        path = os.path.join(TOP, name)
        if os.path.isfile(path):
            yield path
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
            yield from (os.path.join(folder, f) for f in sorted(files) if f.endswith(".py"))


def private_imports(source: str) -> List[str]:
    """Each ``from X import _name`` (a private name of another module; dunders such as __version__ are
    public), as ``X._name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{'.' * node.level}{node.module or ''}.{alias.name}")
    return found


def test_the_check_finds_a_private_import() -> None:
    assert private_imports("from ensure_flydsl.doctor.check import OK, _ok\nfrom x import __version__\n") == [
        "ensure_flydsl.doctor.check._ok"]


def test_no_private_name_is_imported_across_modules() -> None:
    found = []
    for path in _python_files():
        with open(path, encoding="utf-8") as f:
            found.extend(f"{os.path.relpath(path, TOP)}: {name}" for name in private_imports(f.read()))
    assert found == []
