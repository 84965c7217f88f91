"""Run the tool as a second, unprivileged user (nobody, 65534) while the tests run as root: root ignores
mode bits, so a read-only folder is read-only only to another user.

The tests' interpreter lives under /root (mode 0700), out of that user's reach: the tool runs under the
system's /usr/bin/python3 with a world-readable copy of ensure_flydsl and its three dependencies on
PYTHONPATH, in a world-readable work folder.  ``unavailable()`` says why this cannot be done here (not
root, no setpriv, no usable system Python), for a skip with that reason.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional

UID = GID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"
_PACKAGES = ("ensure_flydsl", "packaging", "filelock", "installer")


def unavailable() -> Optional[str]:
    if os.geteuid() != 0:
        return "the tests do not run as root, so they cannot act as a second user"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"{SYSTEM_PYTHON} is missing"
    out = subprocess.run(["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", SYSTEM_PYTHON, "-c",
                          "import sys; print(sys.version_info >= (3, 9))"], stdout=subprocess.PIPE, text=True,
                         check=False)
    if out.stdout.strip() != "True":
        return f"{SYSTEM_PYTHON} does not run as uid {UID}, or is older than 3.9"
    return None


class Nobody:
    """A world-readable work folder, the tool's code in it, and a way to run commands as uid 65534."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ensure-flydsl-nobody-")
        os.chmod(self.dir, 0o755)
        self.site = os.path.join(self.dir, "site")
        os.makedirs(self.site)
        for name in _PACKAGES:
            module = importlib.import_module(name)
            source = os.path.dirname(str(module.__file__))
            shutil.copytree(source, os.path.join(self.site, name),
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self.home = self.own_folder("home")

    def own_folder(self, name: str) -> str:
        """A folder of the work folder that belongs to the second user."""
        path = os.path.join(self.dir, name)
        os.makedirs(path, exist_ok=True)
        self.give(path)
        return path

    def give(self, path: str) -> None:
        os.chown(path, UID, GID)
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(folder, name), UID, GID)

    def copy_repo(self, path: str) -> str:
        """A world-readable copy of a fixture repository; the second user's git is told to trust it
        (safe.directory in its HOME: git refuses another owner's repository otherwise)."""
        target = os.path.join(self.dir, "repos", os.path.basename(path))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.chmod(os.path.dirname(target), 0o755)
        shutil.copytree(path, target, symlinks=True)
        for folder, _dirs, files in os.walk(target):
            os.chmod(folder, 0o755)
            for name in files:
                os.chmod(os.path.join(folder, name), 0o644 | (os.stat(os.path.join(folder, name)).st_mode & 0o111))
        with open(os.path.join(self.home, ".gitconfig"), "w") as handle:
            handle.write("[safe]\n\tdirectory = *\n")
        os.chown(os.path.join(self.home, ".gitconfig"), UID, GID)
        return target

    def env(self, base: Dict[str, str]) -> Dict[str, str]:
        env = {k: v for k, v in base.items() if not k.startswith(("AWS_", "XDG_"))}
        env.update({"HOME": self.home, "PYTHONPATH": self.site, "FLYDSL_PYTHON": SYSTEM_PYTHON,
                    "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": self.home})
        return env

    def cmd(self, *args: str) -> List[str]:
        return ["setpriv", f"--reuid={UID}", f"--regid={GID}", "--clear-groups", SYSTEM_PYTHON, "-m",
                "ensure_flydsl", *args]

    def run(self, env: Dict[str, str], *args: str, timeout: float = 180) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(self.cmd(*args), env=self.env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, check=False, cwd=self.home)

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
