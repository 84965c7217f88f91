"""Which versions of a build tool are good enough, and what a private install asks the package index for.

A requirement is a specifier (``>=3.20``; nanobind's ``>=2.9,<3`` where the pin says nothing else:
``source/needs.py: tool_requirements``).  A tool on the machine is good enough when its version's release
satisfies it; a private install asks for the same, and for cmake below 4 as well (``UPPER_BOUNDS``).
"""

from __future__ import annotations

import re
from typing import List, Optional, Sequence

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

# CMake 4 refuses projects that declare cmake_minimum_required(VERSION < 3.5), which third-party code of
# older pins (submodules, LLVM's own runtimes) still does: a provided cmake stays on the 3.x line.  (A
# machine's cmake 4 is still used: the bound is for what this tool installs.)
UPPER_BOUNDS = {"cmake": "4"}
_UPPER = ("<", "<=", "==", "~=", "===")
_VERSION = re.compile(r"(\d+(?:\.\d+)+)")


def version_of(text: str) -> Optional[str]:
    """The first dotted version in ``text`` (``cmake version 3.28.3`` gives 3.28.3)."""
    match = _VERSION.search(text)
    return match.group(1) if match else None


def _parts(requirement: Optional[str]) -> List[str]:
    return [p.strip() for p in (requirement or "").split(",") if p.strip()]


def accepts(version: Optional[str], requirement: Optional[str]) -> bool:
    """Whether ``version``'s release (a release candidate counts as its release) satisfies ``requirement``."""
    if not requirement:
        return True
    if version is None:
        return False
    try:
        return SpecifierSet(requirement).contains(Version(version).base_version)
    except (InvalidVersion, InvalidSpecifier):
        return False


def needed(requirement: str) -> str:
    """What a message says is needed: ``at least 3.20`` for a bare minimum, else the specifier itself."""
    parts = _parts(requirement)
    if len(parts) == 1 and parts[0].startswith(">=") and not parts[0].startswith(">=="):
        return f"at least {parts[0][2:]} is needed"
    return f"a version {','.join(parts)} is needed"


def package_spec(name: str, requirement: Optional[str]) -> str:
    """What ``pip install`` is asked for: ``name`` with the requirement, and its upper bound when the
    requirement names none (cmake<4)."""
    parts = _parts(requirement)
    has_upper = any(Specifier(p).operator in _UPPER for p in parts)
    if name in UPPER_BOUNDS and not has_upper:
        parts.append(f"<{UPPER_BOUNDS[name]}")
    return name + ",".join(parts)


def newest(name: str, versions: Sequence[str], requirement: Optional[str]) -> Optional[str]:
    """The newest of ``versions`` (the package index's) that ``pip install package_spec(...)`` would take."""
    spec = package_spec(name, requirement)[len(name):]
    good = []
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and accepts(text, spec):
            good.append((version, text))
    return max(good)[1] if good else None
