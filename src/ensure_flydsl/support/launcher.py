"""How this copy of the tool is run: again, by itself (the detached worker, the watchdog), and by its caller, for
every command a message names (``bash PATH/ensure_flydsl.sh wait`` through the GEAK folder, else as invoked); and
how it was installed (pip, ``uv tool``, pipx, the GEAK folder), for the remedy of an extra it lacks."""

from __future__ import annotations

import enum
import os
import re
import shlex
import sys
from typing import Dict, List, Mapping, Optional, Sequence

# The caller's command, as the GEAK folder's script sets it (``bash '<its path as invoked>'``) and as the tool
# passes it on to its worker and watchdog, whose own argv is not what the caller typed.
COMMAND_VARIABLE = "ENSURE_FLYDSL_COMMAND"
# pyproject.toml's optional dependencies (tests/unit/test_install_route.py holds these to it).  ``pip install
# 'ensure-flydsl[signing]'`` is wrong under uv and pipx, and impossible in GEAK's folder.
EXTRAS = {
    "s3": ("aiobotocore>=2.19.0", "s3fs>=2025.5.0"),
    "signing": ("cryptography>=42",),
}

_launcher: Optional[List[str]] = None


def set_launcher(command: Sequence[str]) -> None:
    """Called by the GEAK folder's zipapp entry: how this interpreter runs the zipapp again."""
    global _launcher
    _launcher = list(command)


def tool_command() -> List[str]:
    return list(_launcher) if _launcher is not None else [sys.executable, "-m", "ensure_flydsl"]


def command(words: str = "") -> str:
    """The command line a message tells its reader to run, e.g. ``command("wait --timeout 540")``."""
    said = os.environ.get(COMMAND_VARIABLE, "")
    try:
        parts = shlex.split(said) if said.isprintable() and len(said) < 4096 else []
    except ValueError:  # an unclosed quote: not a command line
        parts = []
    base = shlex.join(parts) if parts else _as_invoked()
    return f"{base} {words}" if words else base


def passed_on(environ: Mapping[str, str]) -> Dict[str, str]:
    """``environ`` for the worker and the watchdog, whose own command line is not the caller's: with it."""
    return {**environ, COMMAND_VARIABLE: command()}


def _as_invoked() -> str:
    if _launcher is not None:  # the zipapp run directly, not through its script
        return shlex.join(_launcher)
    script = sys.argv[0] if sys.argv else ""
    if os.path.basename(script) == "ensure-flydsl":  # the installed command (its path, whatever was typed)
        return _typed(os.path.abspath(script))
    if script.endswith(os.path.join("ensure_flydsl", "__main__.py")):
        return f"{_typed(sys.executable)} -m ensure_flydsl"
    return "ensure-flydsl"  # imported by another program: the installed command's name


def _typed(path: str) -> str:
    """``path`` as a person types it: its name when PATH finds this very file by it, else the whole path."""
    name = os.path.basename(path)
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        found = os.path.join(folder, name)
        if folder and os.path.isfile(found) and os.access(found, os.X_OK):
            return name if os.path.abspath(found) == os.path.abspath(path) else shlex.quote(path)
    return shlex.quote(path)


class Route(str, enum.Enum):
    PIP = "pip"
    UV_TOOL = "uv tool"
    PIPX = "pipx"
    GEAK_FOLDER = "GEAK folder"


def install_route() -> Route:
    if _launcher is not None:  # started from the GEAK folder's zipapp
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
        names = ", ".join(p.partition(">=")[0] for p in packages)
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
