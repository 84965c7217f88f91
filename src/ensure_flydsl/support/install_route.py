"""How this copy of the tool was installed (pip, ``uv tool``, pipx, the GEAK folder), for the remedy of an extra
it lacks.  ``pip install 'ensure-flydsl[signing]'`` is wrong under uv and pipx, and impossible in GEAK's."""

from __future__ import annotations

import enum
import os
import re
import shlex
import sys

from packaging.requirements import Requirement

from ensure_flydsl.support.launcher import launcher

# pyproject.toml's optional dependencies (tests/unit/test_install_route.py holds these to it).
EXTRAS = {
    "s3": ("aiobotocore>=2.19.0", "s3fs>=2025.5.0"),
    "signing": ("cryptography>=42",),
}


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
    """What to do about the missing ``extra`` on this route; ``instead``: the way around it without the extra."""
    packages = EXTRAS[extra]
    quoted = " ".join(f"'{p}'" for p in packages)
    route = install_route()
    if route == Route.GEAK_FOLDER:
        names = ", ".join(Requirement(p).name for p in packages)
        return (f"the GEAK folder's vendored tool has no extras ({names}): {instead}, or run an ensure-flydsl "
                f"installed with the '{extra}' extra (docs/GEAK.md)")
    if route == Route.UV_TOOL:
        withs = " ".join(f"--with '{p}'" for p in packages)
        how = f"uv tool install --reinstall {withs} {_uv_source()}"
    elif route == Route.PIPX:
        how = f"pipx inject ensure-flydsl {quoted}"
    else:
        how = f"{shlex.quote(sys.executable)} -m pip install {quoted}"
    return f"install the '{extra}' extra into the tool's environment: {how}; or {instead}"
