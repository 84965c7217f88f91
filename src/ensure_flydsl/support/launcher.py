"""The command that runs this very copy of the tool again (the detached worker, the watchdog): ``python -m
ensure_flydsl``, or what the GEAK folder's launcher (``tool/run.py``) sets before anything else."""

from __future__ import annotations

import sys
from typing import List, Optional, Sequence

_launcher: Optional[List[str]] = None


def set_launcher(command: Sequence[str]) -> None:
    """Called by the GEAK folder's launcher: how this interpreter runs the vendored tool again."""
    global _launcher
    _launcher = list(command)


def launcher() -> Optional[List[str]]:
    """What the GEAK folder's launcher set, or None when the tool was not started by one."""
    return None if _launcher is None else list(_launcher)


def tool_command() -> List[str]:
    return launcher() or [sys.executable, "-m", "ensure_flydsl"]
