"""Run the tool as another user (``setpriv`` to uid/gid 65534, no groups), for the tests of roots made by
one user and read by another.  Needs root (to change user) and ``setpriv``; the tests skip, saying which,
only when one of them is missing.

The other user runs the tool with an interpreter it may execute (the test's own when it can, else the
system's ``python3``) from a world-readable copy of the tool and its pure-Python dependencies
(``as_nobody.Nobody``'s site folder)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, Iterator, List, Optional

import pytest

from tests.helpers.as_nobody import Nobody
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.run_folders import for_the_run
from tests.helpers.workspace import Workspace

OTHER_UID = 65534
SETPRIV = shutil.which("setpriv")


def as_other(cmd: List[str]) -> List[str]:
    assert SETPRIV is not None
    return [SETPRIV, f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", *cmd]


def other_python() -> str:
    """An interpreter the other user can run (3.9 or later), or a skip saying why there is none."""
    if os.geteuid() != 0:
        pytest.skip("running the tool as another user needs root (to change user); this runs as uid "
                    f"{os.geteuid()}")
    if SETPRIV is None:
        pytest.skip("running the tool as another user needs setpriv (util-linux), which is not on PATH")
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if not candidate:
            continue
        # It runs itself again: the tool starts its interpreter for probes (setpriv's own exec may succeed
        # where the other user's cannot, through a folder only root may enter).
        check = ("import subprocess, sys; assert sys.version_info >= (3, 9); "
                 "subprocess.run([sys.executable, '-c', ''], check=True)")
        out = subprocess.run(as_other([candidate, "-c", check]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/", check=False)
        if out.returncode == 0:
            return candidate
    pytest.skip(f"no Python 3.9+ on this machine can be run by uid {OTHER_UID}")
    raise AssertionError("unreachable")


_SITE: List[str] = []


def _world_readable_site() -> str:
    """The tool and its dependencies where the other user can read them: the test's own site folder may be
    under a folder only root may enter (CI's venv is in a mktemp -d folder, mode 0700)."""
    if not _SITE:
        nobody = Nobody()
        for_the_run(nobody.dir)
        _SITE.append(nobody.site)
    return _SITE[0]


def run_as_other(ws: Workspace, python: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``ensure-flydsl ARGS`` as the other user, with the workspace's settings (FLYDSL_PYTHON the other
    user's interpreter)."""
    full: Dict[str, str] = dict(ws.env)
    full.update(env)
    full.update(HOME="/", FLYDSL_PYTHON=python, PYTHONPATH=_world_readable_site())
    return subprocess.run(as_other([python, "-m", "ensure_flydsl", *args]), env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd="/", timeout=120, check=False)


def said_to_other(ws: Workspace, python: str, words: str) -> str:
    """How the tool run by ``run_as_other`` names its command ``words``: the interpreter by its name when the
    other user's PATH finds it so, else by its path."""
    name = os.path.basename(python)
    found = subprocess.run(as_other(["sh", "-c", 'command -v "$0"', name]), env=dict(ws.env, HOME="/"), cwd="/",
                           stdout=subprocess.PIPE, text=True, check=False).stdout.strip()
    return f"{name if found == python else python} -m ensure_flydsl {words}"


def open_workspace(repo: FixtureRepo) -> Iterator[Workspace]:
    """A workspace in a folder every user may enter (pytest's own tmp folder is its user's alone)."""
    top = tempfile.mkdtemp(prefix="ensure-flydsl-users-", dir="/tmp")
    os.chmod(top, 0o755)
    try:
        ws = Workspace(os.path.join(top, "base"), repo)
        os.chmod(ws.base, 0o755)
        yield ws
    finally:
        shutil.rmtree(top, ignore_errors=True)


def read_only_bind(folder: str, at: str) -> Optional[str]:
    """``folder`` mounted read-only at ``at`` (a bind mount); None (with the reason) when mounts are not
    possible here."""
    os.makedirs(at, exist_ok=True)
    done = subprocess.run(["mount", "--bind", folder, at], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    if done.returncode != 0:
        return f"mount --bind is not possible here: {done.stdout.strip()}"
    ro = subprocess.run(["mount", "-o", "remount,bind,ro", at], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True, check=False)
    if ro.returncode != 0:
        subprocess.run(["umount", at], check=False)
        return f"a read-only remount is not possible here: {ro.stdout.strip()}"
    return None
