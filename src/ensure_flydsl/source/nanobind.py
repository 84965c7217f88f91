"""The nanobind a build of the pin may use: the pin's own bounds, and :data:`DEFAULT` (``>=2.9,<3``) where they
say nothing.  nanobind 3 breaks MLIR's configure, and ``build_llvm.sh``'s unguarded pip install takes the
newest.  So the build tools and every pip install of the build are held to this.  The pin says it in its
pyproject, a requirements file, a CMake ``find_package(nanobind ...)`` or build_llvm.sh's pip install.
"""

from __future__ import annotations

import re
from typing import Iterable, List, Mapping, Tuple

from packaging.specifiers import InvalidSpecifier, Specifier
from packaging.version import InvalidVersion, Version

DEFAULT = (">=2.9", "<3")
REQUIREMENTS_FILE = re.compile(r"(?:(?:python|scripts)/)?requirements[A-Za-z0-9_.-]*\.txt")
_LOWER = (">=", ">", "==", "~=", "===")
_UPPER = ("<", "<=", "==", "~=", "===")
_QUOTED = re.compile(r"""["']nanobind\s*((?:[<>=!~]=?|===)[^"';]*)""")
_LINE = re.compile(r"^\s*nanobind\s*((?:[<>=!~]=?|===)[^#;\n]*)", re.MULTILINE | re.IGNORECASE)
_FIND = re.compile(r"find_package\s*\(\s*nanobind\s+([0-9]+(?:\.[0-9]+)*)([^)]*)\)", re.IGNORECASE)
_WORD = re.compile(r"nanobind\s*((?:[<>=!~]=?|===).*)", re.IGNORECASE)


def _specifiers(text: str) -> List[str]:
    """The specifiers of ``text`` (``>=2.0,<3``), normalised; what is not one is left out."""
    found = []
    for part in text.split(","):
        try:
            found.append(str(Specifier(part.strip())))
        except InvalidSpecifier:
            continue
    return found


def pin_specifiers(files: Mapping[str, str], cmake_files: Mapping[str, str],
                   pip_words: Iterable[str]) -> Tuple[str, ...]:
    """Every nanobind specifier the pin's files name: ``files`` (pyproject.toml, requirements files),
    ``cmake_files`` (comments left out), ``pip_words`` (build_llvm.sh's ``pip install`` words, unquoted)."""
    texts = _QUOTED.findall(files.get("pyproject.toml", ""))
    for path, text in sorted(files.items()):
        if REQUIREMENTS_FILE.fullmatch(path):
            texts += _LINE.findall(text)
    for path in sorted(cmake_files):
        for version, rest in _FIND.findall(cmake_files[path]):
            texts.append(("==" if "EXACT" in rest.upper().split() else ">=") + version)
    texts += [m.group(1) for word in pip_words if (m := _WORD.fullmatch(word.strip("\"'")))]
    found: List[str] = []
    for text in texts:
        found += [s for s in _specifiers(text) if s not in found]
    return tuple(found)


def _version(specifier: str) -> Version:
    text = Specifier(specifier).version.rstrip(".*")
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def requirement(pin: Iterable[str]) -> str:
    """The pin's own specifiers, with each of :data:`DEFAULT`'s bounds the pin neither names nor contradicts."""
    own = list(pin)
    operators = [Specifier(s).operator for s in own]
    low, high = DEFAULT
    lower = [] if any(o in _LOWER for o in operators) or any(
        Specifier(s).operator in ("<", "<=") and _version(s) <= _version(low) for s in own) else [low]
    upper = [] if any(o in _UPPER for o in operators) or any(
        Specifier(s).operator in (">", ">=") and _version(s) >= _version(high) for s in own) else [high]
    return ",".join(lower + own + upper)
