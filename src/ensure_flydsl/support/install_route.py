"""How this copy of the tool was installed, and what depends on it: the remedy for an extra it lacks (the command
that runs the tool again is support/launcher.py's).

A copy runs from one of: a pip install (a venv or any site folder), ``uv tool install`` (its environment
holds ``uv-receipt.toml``), pipx (``pipx_metadata.json``), or the GEAK folder that ``ensure-flydsl skill``
writes, whose launcher (``tool/run.py``) calls ``support/launcher.py: set_launcher`` before anything else.  A
remedy that names the wrong route is a dead end at 3 a.m.: ``pip install 'ensure-flydsl[signing]'`` names a package the
index does not have, is wrong under uv and pipx, and impossible in the GEAK folder, which vendors no extras.
"""

from __future__ import annotations

import enum
import os
import re
import shlex
import sys

# re is imported where a value is matched: the warm call imports none (under python3 -E -S, as the GEAK folder
# runs the tool, its import costs as much as the interpreter's start: tests/scenarios/test_warm_imports.py)
from typing import List, Tuple

from ensure_flydsl.support.launcher import launcher

# pyproject.toml's optional dependencies (tests/unit/test_install_route.py holds these to it).
EXTRAS = {
    "s3": ("aiobotocore>=2.19.0", "s3fs>=2025.5.0"),
    "signing": ("cryptography>=42",),
}
GEAK_FOLDER_NOTE = "the GEAK folder's vendored tool has no extras"


class Route(str, enum.Enum):
    PIP = "pip"
    UV_TOOL = "uv tool"
    PIPX = "pipx"
    GEAK_FOLDER = "GEAK folder"


def install_route() -> Route:
    if launcher() is not None:
        return Route.GEAK_FOLDER
    if os.path.isfile(os.path.join(sys.prefix, "uv-receipt.toml")):
        return Route.UV_TOOL
    if os.path.isfile(os.path.join(sys.prefix, "pipx_metadata.json")):
        return Route.PIPX
    return Route.PIP


def _uv_source() -> str:
    """What `uv tool install` was given, from its receipt: ``--from FOLDER ensure-flydsl``, or the name."""

    try:
        with open(os.path.join(sys.prefix, "uv-receipt.toml"), encoding="utf-8") as handle:
            receipt = handle.read(1 << 16)
    except OSError:
        return "ensure-flydsl"

    found = re.search(r'name\s*=\s*"ensure-flydsl"[^}\n]*?(?:directory|path|editable)\s*=\s*"([^"\n]+)"', receipt)
    return f"--from {shlex.quote(found.group(1))} ensure-flydsl" if found else "ensure-flydsl"


def extra_remedy(extra: str, instead: str) -> str:
    """What to do about the missing ``extra``, for the route in use; ``instead`` is the way around it that
    needs no extra (a cache folder instead of a URL, no keys)."""
    packages = EXTRAS[extra]
    quoted = " ".join(f"'{p}'" for p in packages)
    route = install_route()
    if route == Route.GEAK_FOLDER:
        return (f"{GEAK_FOLDER_NOTE} ({', '.join(_names(packages))}): {instead}, or run an ensure-flydsl installed "
                f"with the '{extra}' extra (docs/GEAK.md)")
    if route == Route.UV_TOOL:
        withs = " ".join(f"--with '{p}'" for p in packages)
        how = f"uv tool install --reinstall {withs} {_uv_source()}"
    elif route == Route.PIPX:
        how = f"pipx inject ensure-flydsl {quoted}"
    else:
        how = f"{shlex.quote(sys.executable)} -m pip install {quoted}"
    return f"install the '{extra}' extra into the tool's environment: {how}; or {instead}"


def _names(packages: Tuple[str, ...]) -> List[str]:
    return [re.split(r"[<>=!~\[;]", p, maxsplit=1)[0] for p in packages]
