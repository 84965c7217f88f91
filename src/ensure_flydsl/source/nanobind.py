"""The nanobind a build of the pin may use: what the pin's own files say, and the tool's default where they
say nothing.

nanobind 3 breaks MLIR's configure (upstream's newer sources pin it below 3), and the unguarded
``pip install nanobind numpy pybind11`` of ``build_llvm.sh`` takes the newest there is.  So the private build
tools (``ways/source/tools.py``) and every ``pip install`` the build runs (``ways/source/environment.py``: a pip
constraints file) hold nanobind to :data:`DEFAULT`, ``>=2.9,<3``, bound by bound where the pin does not say
otherwise.  The pin says it in its pyproject (``"nanobind>=2.0"`` in the build requirements, as every FlyDSL
tag has), a requirements file at the top or in ``python/`` or ``scripts/``, a CMake ``find_package(nanobind
2.9 ...)`` (``EXACT``: that version), or a ``pip install 'nanobind<3'`` in ``build_llvm.sh``.  A pin that
names only a lower bound (every tag's ``>=2.0``) keeps it and gets the default upper bound; a default bound
the pin's own bounds contradict (a pin asking for ``>=3``) is left out.

Pure: the files' texts in, a specifier text out.
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
    """The specifiers of ``text`` (``>=2.0,<3``), normalised; one that is not a specifier is left out."""
    found = []
    for part in text.split(","):
        try:
            found.append(str(Specifier(part.strip())))
        except InvalidSpecifier:
            continue
    return found


def pin_specifiers(files: Mapping[str, str], cmake_files: Mapping[str, str],
                   pip_words: Iterable[str]) -> Tuple[str, ...]:
    """Every nanobind specifier the pin's files name: ``files`` (path -> text: pyproject.toml and the
    requirements files are read), ``cmake_files`` (their code, comments left out), ``pip_words`` (the words
    of build_llvm.sh's ``pip install`` lines, unquoted)."""
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
    """The specifier the build holds nanobind to: the pin's own, with each of :data:`DEFAULT`'s bounds the pin
    does not name and does not contradict (``>=2.9`` unless the pin names a lower bound or an upper bound at
    or below 2.9; ``<3`` unless it names an upper bound or a lower bound at or above 3)."""
    own = list(pin)
    operators = [Specifier(s).operator for s in own]
    low, high = DEFAULT
    lower = [] if any(o in _LOWER for o in operators) or any(
        Specifier(s).operator in ("<", "<=") and _version(s) <= _version(low) for s in own) else [low]
    upper = [] if any(o in _UPPER for o in operators) or any(
        Specifier(s).operator in (">", ">=") and _version(s) >= _version(high) for s in own) else [high]
    return ",".join(lower + own + upper)
