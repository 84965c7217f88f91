"""Folders a test process keeps for the whole run (a canary's folder made when its module is imported, the other
user's copy of the tool), outside pytest's own tmp folders: each is removed when the process's session ends
(tests/conftest.py: ``pytest_sessionfinish``, which then checks that the run left nothing in the temporary
folder)."""

from __future__ import annotations

import shutil
from typing import List

_KEPT: List[str] = []


def for_the_run(folder: str) -> str:
    """``folder``, removed when this process's test session ends."""
    _KEPT.append(folder)
    return folder


def remove_run_folders() -> None:
    while _KEPT:
        shutil.rmtree(_KEPT.pop(), ignore_errors=True)
