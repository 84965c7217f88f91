"""The README's agent recipes, extracted from it verbatim and run as an agent would: each block one shell
call (well under a shell tool's 600 s), call 2 repeated while it exits 75, the settings through the
environment, a fixture repository over file://.  Also all of them in one persistent shell: none ends it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import Dict, List

from tests.helpers.workspace import Workspace

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def agent_blocks() -> List[str]:
    """The ```bash blocks of the README's "For agents" section, up to its first subsection, in order."""
    with open(README, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index("\n## For agents\n"):]
    section = section[:section.index("\n### ")]
    return re.findall(r"```bash\n(.*?)```", section, re.DOTALL)


def agent_env(ws: Workspace) -> Dict[str, str]:
    """The settings in the environment; `ensure-flydsl` on PATH; a `python3` first on PATH that is NOT the
    configured interpreter (as on a machine whose FlyDSL interpreter is a venv's): the recipe must use
    FLYDSL_PYTHON."""
    shim = os.path.join(ws.base, "..", "wrong-python3")
    os.makedirs(shim, exist_ok=True)
    with open(os.path.join(shim, "python3"), "w") as handle:
        handle.write("#!/bin/sh\necho 'python3 on PATH is not the configured interpreter' >&2\nexit 42\n")
    os.chmod(os.path.join(shim, "python3"), 0o755)
    env = dict(ws.env, FIXTURE_BUILD_SLEEP="0.2")
    env["PATH"] = os.pathsep.join([shim, os.path.dirname(sys.executable), env["PATH"]])
    return env


def test_the_readme_has_three_agent_calls_without_exit() -> None:
    blocks = agent_blocks()
    assert [b.split()[:2] for b in blocks[:2]] == [["ensure-flydsl", "start"], ["ensure-flydsl", "wait"]]
    assert "--timeout 540" in blocks[1]
    assert len(blocks) == 3
    for block in blocks:
        assert not re.search(r"\bexit\b", block), block  # `exit` ends an agent's persistent shell
        assert not re.search(r"(?<![-{])\bpython3 -c", block), block  # the configured interpreter, not python3


def test_the_readme_agent_calls_run_as_written(ws: Workspace) -> None:
    start, wait, use = agent_blocks()
    env = agent_env(ws)

    def call(block: str) -> "subprocess.CompletedProcess[str]":
        began = time.monotonic()
        out = subprocess.run(["bash", "-c", block], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=600, cwd="/")
        assert time.monotonic() - began < 600
        return out

    assert call(start).returncode == 0
    for _ in range(10):  # the agent repeats call 2 while it exits 75
        waited = call(wait)
        if waited.returncode != 75:
            break
    assert waited.returncode == 0, waited.stdout + waited.stderr
    used = call(use)
    assert used.returncode == 0, used.stdout + used.stderr
    pkgs = os.path.join(ws.root, "build-fly", "python_packages")
    assert used.stdout.strip() == f"{pkgs}/flydsl/__init__.py {ws.root}/kernels/moe_gemm_2stage.py"


def test_the_readme_agent_calls_leave_a_persistent_shell_running(ws: Workspace) -> None:
    """Pasted one after the other into one shell, as an agent's persistent shell runs them: it is still
    there afterwards (before, the loop's `exit $?` closed it)."""
    start, wait, use = agent_blocks()
    script = "\n".join([start, wait, use, "echo the-shell-is-still-here"]) + "\n"
    out = subprocess.run(["bash"], input=script, env=agent_env(ws), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=600, cwd="/")
    assert out.stdout.strip().splitlines()[-1] == "the-shell-is-still-here", out.stdout + out.stderr
    pkgs = os.path.join(ws.root, "build-fly", "python_packages")
    assert f"{pkgs}/flydsl/__init__.py {ws.root}/kernels/moe_gemm_2stage.py" in out.stdout
