"""The command line builds only the parser of the command in use: help, usage and bad input read as they
did when every command's parser was built at each call."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import pytest

from ensure_flydsl.cli.parser import COMMANDS

PUBLIC = [c for c in COMMANDS if not c.startswith("_")]
OWN_FLAGS = {"ensure": ["--json"], "start": [], "wait": ["--timeout", "--heartbeat"], "status": ["--json"],
             "env": ["--format"], "verify": ["--json"], "doctor": ["--json"],
             "cache": ["{list,prune,keygen,sign}", "--max-size", "--out", "--key"], "clean": [],
             "store": ["{list,prune}", "--max-size", "--json"],
             "skill": ["--force", "--wheels", "DIR"]}
ROOTLESS = {"skill"}  # about no root: no setting flags


@pytest.fixture
def env(tmp_path: "os.PathLike[str]") -> Dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLYDSL_")}
    clean["FLYDSL_ROOT"] = os.path.join(str(tmp_path), "base", "FlyDSL")
    clean["COLUMNS"] = "100"
    return clean


def tool(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run([sys.executable, "-m", "ensure_flydsl", *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60, check=False)


def test_help_lists_every_command(env: Dict[str, str]) -> None:
    out = tool(env, "--help")
    assert out.returncode == 0, out.stderr
    listed: List[str] = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("    ")
                         and line.split()[0] in COMMANDS]
    assert listed == PUBLIC
    assert "exit codes: 0 usable" in out.stdout
    assert tool(env, "--version").stdout.startswith("ensure-flydsl ")


@pytest.mark.parametrize("command", PUBLIC)
def test_each_command_has_its_own_help_with_the_settings(env: Dict[str, str], command: str) -> None:
    out = tool(env, command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: ensure-flydsl {command} [-h]")
    settings = ("--root ROOT" in out.stdout, "--require MODULES" in out.stdout, "--no-vllm-moe" in out.stdout)
    assert settings == ((command not in ROOTLESS,) * 3)
    for flag in OWN_FLAGS[command]:
        assert flag in out.stdout, flag
    assert not os.path.exists(os.path.dirname(env["FLYDSL_ROOT"]))


@pytest.mark.parametrize("args, says", [
    (["ensure", "--timeout", "5"], "ensure-flydsl: unrecognized arguments: --timeout 5"),
    (["--json", "--format", "sh"], "ensure-flydsl: unrecognized arguments: --format sh"),
    (["status", "--json", "extra"], "ensure-flydsl: unrecognized arguments: extra"),
    (["wait", "--timeout", "soon"], "ensure-flydsl wait: argument --timeout: 'soon' is not a number of seconds"),
    (["cache", "tidy"], "ensure-flydsl cache: argument {list,prune,keygen,sign}: invalid choice: 'tidy'"),
    (["env", "--format", "xml"], "ensure-flydsl env: argument --format: invalid choice: 'xml'"),
])
def test_bad_arguments_are_bad_input_with_one_line(env: Dict[str, str], args: List[str], says: str) -> None:
    out = tool(env, *args)
    assert out.returncode == 64, out.stderr
    assert says in out.stderr, out.stderr
    assert out.stderr.splitlines()[-1].startswith(says.split(":")[0])
    assert not os.path.exists(os.path.dirname(env["FLYDSL_ROOT"]))  # refused before anything was touched
