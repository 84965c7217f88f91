"""The workspace of a scenario: a base folder with the root in it, the settings pointing at a fixture
repository, and ways to run the tool there."""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List, Mapping, Optional

from ensure_flydsl.layout import host_cache_dir
from tests.helpers.flydsl_fixture import FixtureRepo, counts


def said(words: str = "", environ: Mapping[str, str] = os.environ, python: str = sys.executable) -> str:
    """How the tool names its command ``words`` in a message when a test runs it as ``python -m ensure_flydsl``:
    the interpreter by its name when PATH finds it by that name, else by its path."""
    name = os.path.basename(python)
    found = shutil.which(name, path=environ.get("PATH", ""))
    typed = name if found and os.path.abspath(found) == os.path.abspath(python) else shlex.quote(python)
    return f"{typed} -m ensure_flydsl" + (f" {words}" if words else "")


def host_cache_env(folder: str, environ: Mapping[str, str] = os.environ) -> Dict[str, str]:
    """The variables that make ``folder`` the user's cache folder for the tool (XDG_CACHE_HOME: the host's
    files, such as the ETA history, ``layout.host_cache_dir``), so that no test writes into the real home.
    The tests' conftest sets them for every test (one test is one host: its workspaces share the folder).
    pip's and uv's own caches stay where they were (PIP_CACHE_DIR, UV_CACHE_DIR), so what the package index
    gave one test is not downloaded again by the next."""
    real = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return {"XDG_CACHE_HOME": folder,
            "PIP_CACHE_DIR": environ.get("PIP_CACHE_DIR") or os.path.join(real, "pip"),
            "UV_CACHE_DIR": environ.get("UV_CACHE_DIR") or os.path.join(real, "uv")}


def other_python(not_tag: str) -> Optional[str]:
    """An interpreter of another minor version than ``not_tag`` (cpython-311 ...), if this machine has one:
    ``python3.X`` on PATH, or one of pyenv's versions (its root from ``pyenv root``).  Callers skip without."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(9, 15)]
    pyenv = shutil.which("pyenv")
    if pyenv:
        root = subprocess.run([pyenv, "root"], stdout=subprocess.PIPE, text=True, check=False).stdout.strip()
        candidates += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")))
    for candidate in candidates:
        if not candidate or ".pyenv/shims" in candidate:
            continue
        out = subprocess.run([candidate, "-c", "import sys; print(sys.implementation.cache_tag)"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False)
        if out.returncode == 0 and out.stdout.decode().strip() not in ("", not_tag):
            return candidate
    return None


class Workspace:
    """A base folder with the root in it, the settings pointing at the fixture repo, and helpers."""

    def __init__(self, base: str, repo: FixtureRepo) -> None:
        self.base = base
        self.root = os.path.join(base, "FlyDSL")
        self.repo = repo
        self.counter = os.path.join(os.path.dirname(base), "counters")
        os.makedirs(self.base, exist_ok=True)
        os.makedirs(self.counter, exist_ok=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        env.update({
            "FLYDSL_ROOT": self.root,
            "FLYDSL_REPO": repo.url,
            "FLYDSL_PIN": repo.commits["dev"],
            "FLYDSL_PYTHON": sys.executable,
            # The fixture's tags v0.2.2 and v0.2.3 would send `auto` to PyPI for the real wheels; tests of
            # the release path ask for it themselves.
            "FLYDSL_STRATEGY": "source",
            "ROCM_PATH": os.path.join(os.path.dirname(base), "no-rocm"),
            "FIXTURE_COUNTER_DIR": self.counter,
            # Each workspace is a host of its own, with its own host store (two workspaces of one test are two
            # containers unless a test gives them one FLYDSL_STORE: tests/scenarios/test_host_store.py).
            "FLYDSL_STORE": os.path.join(os.path.dirname(base), "host-store"),
        })
        self.env: Dict[str, str] = env

    @property
    def host_dir(self) -> str:
        """The tool's folder in the user's cache folder of this workspace's runs (the host's ETA history)."""
        found = host_cache_dir(self.env)
        assert found is not None
        return found

    @property
    def env_file(self) -> str:
        return os.path.join(self.root, "flydsl_env.sh")

    @property
    def env_json(self) -> str:
        return os.path.join(self.root, "flydsl_env.json")

    @property
    def fail_marker(self) -> str:
        return os.path.join(self.base, ".flydsl_build.failed")

    @property
    def lock_file(self) -> str:
        return os.path.join(self.base, ".flydsl_build.lock")

    @property
    def log(self) -> str:
        return os.path.join(self.base, "ensure_flydsl.log")

    def cmd(self, *args: str) -> List[str]:
        return [sys.executable, "-m", "ensure_flydsl", *args]

    def run(self, *args: str, timeout: float = 120, cwd: Optional[str] = None,
            **env: str) -> subprocess.CompletedProcess:
        """The tool with ``args``, the workspace's settings and ``env``, in ``cwd`` (default: the test's)."""
        full = dict(self.env)
        full.update(env)
        return subprocess.run(self.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, text=True, check=False, cwd=cwd)

    def popen(self, *args: str, **env: str) -> subprocess.Popen:
        full = dict(self.env)
        full.update(env)
        return subprocess.Popen(self.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)

    def marker(self) -> Dict[str, object]:
        with open(self.fail_marker) as handle:
            data = json.load(handle)
        assert isinstance(data, dict)
        return data

    def env_twin(self) -> Dict[str, object]:
        with open(self.env_json) as handle:
            data = json.load(handle)
        assert isinstance(data, dict)
        return data

    def source_and_import(self, python: str = sys.executable, extra: str = "") -> subprocess.CompletedProcess:
        """A caller's last step (the README's recipe): source the env file, import from ONE tree, print the files."""
        script = (
            f'. "$1" && {python} -c "import flydsl, kernels.moe_gemm_2stage as k; '
            f'print(flydsl.__file__); print(k.__file__); print(flydsl.__version__)"'
        )
        env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        return subprocess.run(["bash", "-c", extra + script, "bash", self.env_file], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/", check=False)

    def count(self, name: str) -> int:

        return len(counts(self.counter, name))
