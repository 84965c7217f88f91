"""The extras a remedy names are pyproject.toml's, and the tool's own command is what runs this copy."""

from __future__ import annotations

import os
import re
import sys

import pytest

from ensure_flydsl.support.launcher import COMMAND_VARIABLE, EXTRAS, Route, command, install_route, tool_command

PYPROJECT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "pyproject.toml")


def test_the_extras_named_in_remedies_are_pyproject_s() -> None:
    with open(PYPROJECT) as handle:
        text = handle.read()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    for extra, packages in EXTRAS.items():
        line = re.search(rf"^{extra} = \[(.*)\]$", section, re.M)
        assert line is not None, extra
        assert tuple(re.findall(r'"([^"]+)"', line.group(1))) == packages


def test_an_installed_copy_runs_itself_as_a_module() -> None:
    assert tool_command() == [sys.executable, "-m", "ensure_flydsl"]
    assert install_route() == Route.PIP  # the suite's own venv


def test_a_command_variable_that_is_no_command_line_is_not_repeated(monkeypatch: "pytest.MonkeyPatch") -> None:
    monkeypatch.setenv(COMMAND_VARIABLE, "bash '/opt/my skills/ensure_flydsl.sh'")
    assert command("wait --timeout 540") == "bash '/opt/my skills/ensure_flydsl.sh' wait --timeout 540"
    for bad in ("bash 'unclosed", "bash x\nrm -rf /", "", "x" * 5000):  # not one printable command line
        monkeypatch.setenv(COMMAND_VARIABLE, bad)
        assert command("wait") == "ensure-flydsl wait"  # under pytest: the installed command's name
