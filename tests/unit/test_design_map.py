"""docs/DESIGN.md is the maintainers' map (issue 40, item 7): at most 250 lines, sentences under 30 words, and
every module and name it cites exists (`path/module.py` and `path/module.py: name, other`)."""

from __future__ import annotations

import ast
import os
import re
from typing import List, Set

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DESIGN = os.path.join(TOP, "docs", "DESIGN.md")
PACKAGE = os.path.join(TOP, "src", "ensure_flydsl")
CITED = re.compile(r"`([A-Za-z_][\w/]*\.py)(?::\s*([^`]+))?`")


def text() -> str:
    with open(DESIGN, encoding="utf-8") as handle:
        return handle.read()


def where(path: str) -> str:
    """A cited module: under the package, or (a test's, a doc's) under the checkout."""
    for base in (PACKAGE, TOP):
        if os.path.isfile(os.path.join(base, path)):
            return os.path.join(base, path)
    return ""


def defined(path: str) -> Set[str]:
    """The names a module defines at any depth (functions, classes, methods, module-level assignments)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    names: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    names.add(target.id)
    return names


def missing_citations(doc: str) -> List[str]:
    missing = []
    for match in CITED.finditer(doc):
        path = where(match.group(1))
        if not path:
            missing.append(match.group(1))
            continue
        for name in (match.group(2) or "").split(","):
            name = name.strip().split(".")[-1]
            if name and name not in defined(path):
                missing.append(f"{match.group(1)}: {name}")
    return missing


def test_the_check_finds_what_is_not_there() -> None:
    assert missing_citations("`warm.py: answer, nosuchname` and `nosuch/module.py`") == [
        "warm.py: nosuchname", "nosuch/module.py"]


def test_every_module_and_name_it_cites_exists() -> None:
    assert missing_citations(text()) == []


def test_it_reads_in_one_sitting() -> None:
    doc = text()
    assert len(doc.splitlines()) <= 250
    prose = re.sub(r"```.*?```", "", doc, flags=re.S)  # the on-disk tree is a drawing, not prose
    prose = " ".join(line for line in prose.splitlines() if not line.startswith(("|", "    ", "#")))
    prose = re.sub(r"`[^`]*`", "x", prose)  # a cited name is one word
    long = [s for s in re.split(r"(?<=[.!?])\s+", prose) if len(s.split()) >= 30]
    assert long == []
