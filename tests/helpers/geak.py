"""A fake GEAK tree around the folder `ensure-flydsl skill` writes, run as GEAK's containers run it: bash, a
bare ``python3`` first on PATH (a venv made ``--without-pip``, nothing installed in it), and no
``ensure-flydsl`` anywhere on PATH."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

from tests.helpers.flydsl_fixture import FixtureRepo

SKILLS = os.path.join("perf_knowledge", "expert_skills", "skills")
SCRIPT = os.path.join(SKILLS, "ensure_flydsl", "ensure_flydsl.sh")
SYSTEM_PATH = "/usr/bin:/bin"  # git, bash, cmake, ninja, a C compiler; no ensure-flydsl


def build_folder(dest: str, cache_home: str, *args: str, tool: Optional[str] = None,
                 **env: str) -> "subprocess.CompletedProcess[str]":
    """`ensure-flydsl skill DEST` run as a user runs it: the CLI of the tool under test, or ``tool`` (an
    installed ``ensure-flydsl``), with ``env`` over the test's environment."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    full.update(env, XDG_CACHE_HOME=cache_home)
    command = [tool] if tool else [sys.executable, "-m", "ensure_flydsl"]
    return subprocess.run([*command, "skill", dest, *args], env=full, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, check=False)


def pyenv_python(minor: str) -> Optional[str]:
    """pyenv's CPython 3.<minor> (this machine and CI have pyenv with 3.6 to 3.13), or one on PATH."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"3.{minor}.*", "bin", f"python3.{minor}")))
    return found[-1] if found else shutil.which(f"python3.{minor}")


def bare_venv(base_python: str, folder: str) -> str:
    """A venv made with --without-pip: its bin/python3 imports nothing beyond the standard library."""
    subprocess.run([base_python, "-m", "venv", "--without-pip", folder], check=True, timeout=120)
    python = os.path.join(folder, "bin", "python3")
    assert subprocess.run([python, "-c", "import pip"], stderr=subprocess.DEVNULL, check=False).returncode == 1
    return python


class Geak:
    """GEAK's checkout (with the apply skill's folder beside ours) and a container's environment."""

    def __init__(self, base: str, folder: str, repo: FixtureRepo, python: str) -> None:
        self.top = os.path.join(base, "GEAK")
        self.skill = os.path.join(self.top, SKILLS, "ensure_flydsl")
        self.shim_dir = os.path.join(self.top, SKILLS, "apply_flydsl_moe_to_vllm")
        shutil.copytree(folder, self.skill, symlinks=True)
        os.makedirs(self.shim_dir)
        with open(os.path.join(self.shim_dir, "flydsl_moe_shim.py"), "w") as handle:
            handle.write("# vLLM's FlyDSL MoE shim (a stand-in)\n")
        self.script = os.path.join(self.top, SCRIPT)
        self.base = os.path.join(base, "opt-flydsl")  # the root's parent: absent until a call makes it
        self.root = os.path.join(self.base, "FlyDSL")
        self.python = python
        self.repo = repo
        home = os.path.join(base, "home")
        os.makedirs(home)
        path = os.pathsep.join([os.path.dirname(python), SYSTEM_PATH])
        assert shutil.which("ensure-flydsl", path=path) is None
        self.env: Dict[str, str] = {
            "HOME": home, "PATH": path, "LANG": "C.UTF-8",
            "FLYDSL_ROOT": self.root, "FLYDSL_REPO": repo.url, "FLYDSL_PIN": repo.commits["dev"],
            # The fixture's tags would send `auto` to the package index for the real wheels.
            "FLYDSL_STRATEGY": "source",
            "ROCM_PATH": os.path.join(base, "no-rocm"),
            "FIXTURE_COUNTER_DIR": os.path.join(base, "counters"),
        }
        for name in ("ENSURE_FLYDSL_FAULT_LOG",):
            if name in os.environ:
                self.env[name] = os.environ[name]
        os.makedirs(self.env["FIXTURE_COUNTER_DIR"])

    @property
    def env_file(self) -> str:
        return os.path.join(self.root, "flydsl_env.sh")

    @property
    def fail_marker(self) -> str:
        return os.path.join(self.base, ".flydsl_build.failed")

    def bash(self, script: str, timeout: float = 300, **env: str) -> "subprocess.CompletedProcess[str]":
        """``script`` run by bash from GEAK's top folder, as an agent's shell call runs it."""
        return subprocess.run(["bash", "-c", script], cwd=self.top, env={**self.env, **env}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)

    def run(self, *args: str, timeout: float = 300, **env: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(["bash", self.script, *args], cwd=self.top, env={**self.env, **env}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)

    def one_tree(self, python: str = "python3") -> List[str]:
        """GEAK's check: source the env file and import both modules; their files."""
        out = self.bash(f'source "$FLYDSL_ROOT/flydsl_env.sh" && {python} -c "import flydsl, '
                        'kernels.moe_gemm_2stage as k; print(flydsl.__file__); print(k.__file__)"')
        assert out.returncode == 0, out.stdout + out.stderr
        files = out.stdout.split()
        assert files == [os.path.join(self.root, "build-fly", "python_packages", "flydsl", "__init__.py"),
                         os.path.join(self.root, "kernels", "moe_gemm_2stage.py")], files
        return files
