"""The recipes of the README and of docs/*.md, extracted from them verbatim and run: the README's quick start
(the release pin, the real flydsl 0.2.2 wheel), its agent calls as an agent would run them (each block one
shell call, well under a shell tool's 600 s; call 2 repeated while it exits 75; the settings through the
environment; a fixture repository over file://; also all of them in one persistent shell: none ends it) and
docs/agents.md's copy of them, docs/fleet.md's signing recipe, docs/air-gapped.md's mirrors, and docs/guide.md's
Python API block."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Dict, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, add_submodule, git, write
from tests.helpers.workspace import Workspace

TOP = os.path.join(os.path.dirname(__file__), "..", "..")
README = os.path.join(TOP, "README.md")


def section_blocks(heading: str, document: str = README, language: str = "bash") -> List[str]:
    """The ``language`` blocks of ``document``'s section that starts with ``heading``, up to the next heading."""
    with open(document, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index(f"\n{heading}") + 1:]
    following = re.search(r"\n#{2,3} ", section)  # the next heading (a block's comments are "# ...")
    section = section[:following.start()] if following else section
    return re.findall(f"```{language}\n(.*?)```", section, re.DOTALL)


def agent_blocks() -> List[str]:
    """The ```bash blocks of the README's "For agents" section, up to its first subsection, in order."""
    return section_blocks("## For agents\n")


def test_docs_agents_md_shows_the_readme_s_three_calls() -> None:
    """docs/agents.md repeats the three calls for an agent that reads only it: the very blocks the tests below
    run from the README."""
    assert section_blocks("## The three calls\n", os.path.join(TOP, "docs", "agents.md")) == agent_blocks()


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


def test_the_readme_signing_recipe_works_from_any_folder(tmp_path: "os.PathLike[str]",
                                                         fixture_repo: FixtureRepo) -> None:
    """Issue 26 item 6 (docs/fleet.md's recipe): the recipe's `FLYDSL_CACHE_TRUSTED_KEYS="$(cat ci-2026.pub)"` run
    from another folder gave an empty value, which turned signature checks off without a word.  Its three blocks
    (keygen; the CI host; a fleet host), each run as written in a shell of its own from `/`, the key folder and
    the bucket swapped for folders here: the fleet host fetches what ci-2026 signed and says it checked."""
    keygen, ci, fleet = section_blocks("## Signed entries", os.path.join(TOP, "docs", "fleet.md"))
    keys, cache = os.path.join(str(tmp_path), "keys"), os.path.join(str(tmp_path), "cache")

    def run(block: str, ws: Workspace) -> "subprocess.CompletedProcess[str]":
        script = block.replace("/etc/flydsl-keys", keys).replace("s3://bucket/flydsl", cache)
        env = dict(ws.env, PATH=os.pathsep.join([os.path.dirname(sys.executable), ws.env["PATH"]]))
        env.pop("FLYDSL_CACHE", None)
        return subprocess.run(["bash", "-e", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=600, cwd="/")

    ci_host = Workspace(os.path.join(str(tmp_path), "ci", "base"), fixture_repo)
    fleet_host = Workspace(os.path.join(str(tmp_path), "fleet", "base"), fixture_repo)
    for block, ws in ((keygen, ci_host), (ci, ci_host)):
        out = run(block, ws)
        assert out.returncode == 0, out.stdout + out.stderr
    assert ci_host.env_twin()["how"] == "built"
    out = run(fleet, fleet_host)
    assert out.returncode == 0, out.stdout + out.stderr
    assert fleet_host.env_twin()["how"] == "cached" and fleet_host.count("build") == 0
    assert "is signed by ci-2026, which FLYDSL_CACHE_TRUSTED_KEYS trusts" in out.stdout + out.stderr, out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("tree", "mlir"))]
    assert len(rows) == 2 and all(row.endswith("signed by ci-2026 (trusted)") for row in rows), out.stdout
    # The old recipe's failure is loud now: an empty value is bad input naming the setting, not checks off.
    old = fleet.replace("/etc/flydsl-keys/ci-2026.pub", '"$(cat ci-2026.pub)"')
    assert old != fleet
    refused = run(old.splitlines()[0] + "\nensure-flydsl\n", fleet_host)
    assert refused.returncode == 64, refused.stdout + refused.stderr
    line = refused.stderr.splitlines()[-1]
    assert line.startswith("ensure-flydsl: FLYDSL_CACHE_TRUSTED_KEYS='' is not allowed") and "set but empty" in line


@pytest.mark.index  # the real flydsl 0.2.2 wheel
def test_the_readme_quick_start_takes_the_release_wheel(tmp_path: "os.PathLike[str]", release_repo: FixtureRepo,
                                                        wheelhouse: str) -> None:
    """The README's quick start as written, in one shell: the release pin, the root under $HOME, the `python3`
    on PATH; FLYDSL_REPO a fixture whose v0.2.2 holds the real wheel's sources, pip's own settings a
    wheelhouse.  The wheel is installed (nothing built) and the last line prints the two files of one tree."""
    (block,) = section_blocks("## Quick start")
    ws = Workspace(os.path.join(str(tmp_path), "base"), release_repo)
    home = os.path.join(str(tmp_path), "home")
    dropped = ("FLYDSL_ROOT", "FLYDSL_PIN", "FLYDSL_PYTHON", "FLYDSL_STRATEGY")  # the recipe's, or the defaults
    env = {k: v for k, v in ws.env.items() if k not in dropped}
    env.update(HOME=home, PIP_NO_INDEX="1", PIP_FIND_LINKS=wheelhouse,
               PATH=os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]]))
    out = subprocess.run(["bash", "-e", "-c", block], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=600, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr
    root = os.path.join(home, ".cache", "flydsl", "FlyDSL")
    pkgs = os.path.join(root, "build-fly", "python_packages")
    assert out.stdout.strip().splitlines()[-1] == f"{pkgs}/flydsl/__init__.py {root}/kernels/moe_gemm_2stage.py"
    with open(os.path.join(root, "flydsl_env.json"), encoding="utf-8") as handle:
        assert json.load(handle)["how"] == "released"
    assert ws.count("build") == 0 and ws.count("llvm") == 0


def test_the_guide_s_python_api_block_runs(ws: Workspace) -> None:
    """docs/guide.md's Python API block, its root swapped for the workspace's: ensure, then activate, then the
    tree imports in that process."""
    (block,) = section_blocks("## Python API", os.path.join(TOP, "docs", "guide.md"), "python")
    assert '"/opt/flydsl/FlyDSL"' in block
    script = block.replace('"/opt/flydsl/FlyDSL"', repr(ws.root)) + (
        "import flydsl, kernels.moe_gemm_2stage as k\nprint(result.how, flydsl.__file__, k.__file__)\n")
    out = subprocess.run([sys.executable, "-c", script], env=ws.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=600, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr
    pkgs = os.path.join(ws.root, "build-fly", "python_packages")
    assert out.stdout.strip().splitlines()[-1] == (
        f"built {pkgs}/flydsl/__init__.py {ws.root}/kernels/moe_gemm_2stage.py")


def test_the_air_gapped_recipe_builds_through_mirrors_on_disk(tmp_path: "os.PathLike[str]",
                                                              own_repo: FixtureRepo) -> None:
    """docs/air-gapped.md's recipe as written, in one shell, with a folder standing for GitHub where it is
    reachable and the https server of the mirrors swapped for the copy on disk (as the recipe's comment
    offers): FLYDSL_REPO left at its GitHub default, the pin's submodule and build_llvm.sh's llvm-project at
    their GitHub URLs.  The four mirrors are made, the doctor runs, and the build fetches everything through
    them; nothing is written to a git config file."""
    tmp = str(tmp_path)
    github = os.path.join(tmp, "github")  # what https://github.com/ serves where it is reachable
    add_submodule(own_repo, os.path.join(github, "dmlc", "dlpack.git"), "with-sub")
    git(own_repo.path, "config", "-f", ".gitmodules", "submodule.thirdparty/dlpack.url",
        "https://github.com/dmlc/dlpack.git")
    git(own_repo.path, "commit", "-q", "-am", "dlpack from GitHub")
    pin = git(own_repo.path, "rev-parse", "HEAD")
    os.makedirs(os.path.join(github, "ROCm"))
    os.symlink(own_repo.path, os.path.join(github, "ROCm", "FlyDSL.git"))
    for name in ("apache/tvm-ffi", "llvm/llvm-project"):
        path = os.path.join(github, name + ".git")
        os.makedirs(path)
        git(path, "init", "-q", "-b", "main")
        write(os.path.join(path, "README.txt"), f"fixture {name}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"fixture {name} commit")
    (block,) = section_blocks("## Air-gapped sites", os.path.join(TOP, "docs", "air-gapped.md"))
    mirrors = os.path.join(tmp, "srv", "mirrors", "github") + "/"
    script = (block.replace('"https://github.com/$r.git"', f'"{github}/$r.git"')
              .replace("/srv/mirrors/github/", mirrors)
              .replace("https://git.example.internal/mirrors/github/", mirrors))
    assert script.count(mirrors) >= 3 and f'"{github}/$r.git"' in script
    ws = Workspace(os.path.join(tmp, "base"), own_repo)
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    env = {k: v for k, v in ws.env.items() if k not in ("FLYDSL_REPO", "XDG_CONFIG_HOME")}
    env.update(FLYDSL_PIN=pin, HOME=home, FIXTURE_LLVM_CLONE="https://github.com/llvm/llvm-project.git",
               PATH=os.pathsep.join([os.path.dirname(sys.executable), env["PATH"]]))
    out = subprocess.run(["bash", "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=600, cwd="/")
    assert out.returncode == 0, out.stdout + out.stderr  # the last line's: ensure-flydsl
    for name in ("ROCm/FlyDSL", "dmlc/dlpack", "apache/tvm-ffi", "llvm/llvm-project"):
        assert os.path.isdir(os.path.join(mirrors, name + ".git")), name
    assert ws.env_twin()["how"] == "built"
    assert os.path.isfile(os.path.join(ws.root, "thirdparty", "dlpack", "include", "dlpack", "dlpack.h"))
    with open(ws.log, encoding="utf-8") as handle:
        assert "LLVM source from https://github.com/llvm/llvm-project.git: fixture" in handle.read()
    assert os.listdir(home) == []  # no git config file written
    # The doctor's line for the submodule names the mirror that serves it.
    assert f"thirdparty/dlpack from https://github.com/dmlc/dlpack.git through the mirror {mirrors}dmlc/dlpack.git" \
        in out.stdout, out.stdout
