"""A pyenv root of a test's own (issue 26, item 3): ``shims/python3`` is the exact script ``pyenv rehash``
writes, ``versions/A`` and ``versions/B`` are two venvs of the test interpreter (two interpreters that both
work, told apart by their ``sys.executable`` and prefix, as pyenv-virtualenv's environments are), and the
global ``version`` file selects one.  The shim runs either this machine's real pyenv or a stand-in with
pyenv's lookup (``libexec/pyenv`` below).  Used by tests/scenarios/test_warm_shims.py and the state machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, Optional

import pytest

# What `pyenv rehash` writes for every shim (libexec/pyenv-rehash: create_prototype_shim), for a root and the
# pyenv it runs.
PYENV_SHIM = """#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${{0##*/}}"

export PYENV_ROOT="{root}"
SHIM_PATH=${{0%/*}}
if [[ $SHIM_PATH != "{root}/shims" ]]; then
  export _PYENV_SHIM_PATH="$SHIM_PATH"
fi
exec "{pyenv}" exec "$program" "$@"
"""

# A stand-in for pyenv where it is not installed: `pyenv exec PROGRAM ARGS` as pyenv picks the version
# (libexec/pyenv-version-file, -version-file-read): PYENV_VERSION, else the first .python-version from
# PYENV_DIR (default: the working folder) up to /, else $PYENV_ROOT/version.
FAKE_PYENV = """#!/usr/bin/env bash
set -e
[ "$1" = exec ] || { echo "fake pyenv: exec only" >&2; exit 1; }
program="$2"
shift 2
version="$PYENV_VERSION"
if [ -z "$version" ]; then
  dir="${PYENV_DIR:-$PWD}"
  file="$PYENV_ROOT/version"
  while :; do
    if [ -f "$dir/.python-version" ]; then file="$dir/.python-version"; break; fi
    [ -n "$dir" ] || break
    dir="${dir%/*}"
  done
  read -r version _ < "$file" || [ -n "$version" ]
fi
exec "$PYENV_ROOT/versions/$version/bin/$program" "$@"
"""


def real_pyenv() -> Optional[str]:
    found = shutil.which("pyenv")
    return os.path.realpath(found) if found else None


class PyenvRoot:
    """A pyenv root of our own: the shim, versions A and B (venvs of the test interpreter), the global file."""

    def __init__(self, folder: str, dispatcher: str) -> None:
        self.root = folder
        if dispatcher == "real":
            pyenv = real_pyenv()
            if pyenv is None:
                pytest.skip("pyenv is not installed here; the stand-in dispatcher's case covers the same lookup")
        else:
            pyenv = os.path.join(folder, "libexec", "pyenv")
            write(pyenv, FAKE_PYENV, executable=True)
        self.shim = os.path.join(folder, "shims", "python3")
        write(self.shim, PYENV_SHIM.format(root=folder, pyenv=pyenv), executable=True)
        for version in ("A", "B"):
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", os.path.join(folder, "versions", version)],
                           check=True)
        self.select_global("A")

    def python(self, version: str) -> str:
        """What the probe reports as ``sys.executable`` when the shim lands on ``version``."""
        return os.path.join(self.root, "versions", version, "bin", "python3")

    def select_global(self, version: str) -> None:
        write(os.path.join(self.root, "version"), version + "\n")

    def env(self) -> Dict[str, str]:
        """The caller's environment: the shim's folder first on PATH, no pyenv selection of the caller's own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYENV")}
        env["PATH"] = os.pathsep.join([os.path.dirname(self.shim), env.get("PATH", "")])
        env["FLYDSL_PYTHON"] = "python3"
        return env


def write(path: str, text: str, executable: bool = False) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    if executable:
        os.chmod(path, 0o755)
