"""The warm call imports only what it reads (issue 28, item 7): none of the modules a full run, a parser, a record
library, a signal's name or a context manager would bring, whichever way it is started: ``python -m
ensure_flydsl``, the installed command (bin/ensure-flydsl), or the GEAK folder's launcher (``python3 -E -S
tool/run.py``).  Each was measured (benchmarks/geak_folder.py, `python -X importtime`, instructions under callgrind):
dataclasses with inspect cost more instructions than the interpreter's own start; argparse and its translations
a sixth of the call; signal (its three enums), contextlib and shlex 3 % each; enum with functools and
collections a fifth; re (pip's wrapper of an entry point imported it) a third.  With --json they stay: json imports
re, which imports enum."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import List, Set, Tuple

import pytest

import ensure_flydsl
from tests.helpers.workspace import Workspace

# Never on the warm path: what a full run (processes, threads, locks, copies), a parser, dataclasses, typing,
# the signal module (main takes the handlers from _signal), contextlib, or a failure (a full disk, a fault point,
# the exit codes and stages: stages.py, whose enums errors.py gives at their first use), or shlex (the env file's
# quoting is shlex.quote's rule without the module: runs/markers.py, _quote), or the command table (cli/commands.py:
# main dispatches the default command to its handler by name).
NOT_WARM = {"dataclasses", "inspect", "argparse", "gettext", "subprocess", "threading", "shutil", "filelock",
            "packaging", "tempfile", "hashlib", "typing", "signal", "contextlib", "collections.abc", "select",
            "traceback", "socket", "ensure_flydsl.pipeline.run", "ensure_flydsl.pipeline.provision",
            "ensure_flydsl.runs.twin_gate", "ensure_flydsl.cli.parser", "ensure_flydsl.support.space",
            "ensure_flydsl.support.faults", "ensure_flydsl.stages", "ensure_flydsl.cli.commands",
            "shlex"}
# Nor, without --json (which prints its result with json), the json package: the twin is read with json's own
# C scanner (support/files.py: _loads), json's import costing a twentieth of the call.
NOT_WARM_PLAIN = {"json"}
# Nor, without --json, re (under python3 -E -S, as the GEAK folder runs the tool, its import costs as much as
# the interpreter's start): the pin and module names are checked without it (support/names.py: pin_text,
# module_name), a local repository path needs none.  Nor enum, functools, collections or types (enum alone is
# half the interpreter's start): the warm path's closed sets are support/choice.py's, the build's output tail is
# a list.  The console script is the tool's own (bin/ensure-flydsl), not pip's wrapper, which imports re.
NOT_WARM_PLAIN |= {"re", "enum", "functools", "collections", "types"}
PACKAGE = os.path.dirname(os.path.abspath(ensure_flydsl.__file__))
TEMPLATE = os.path.join(PACKAGE, "geak", "templates", "run.py.in")


def imported(ws: Workspace, argv: List[str]) -> Set[str]:
    out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=ws.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, check=False, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}


def geak_launcher(folder: str) -> str:
    """The GEAK folder's tool/: the launcher ``ensure-flydsl skill`` writes from its template, beside this
    package (the vendored libraries are left out: the warm call must not need them)."""
    tool = os.path.join(folder, "tool")
    shutil.copytree(PACKAGE, os.path.join(tool, "ensure_flydsl"), ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(TEMPLATE, os.path.join(tool, "run.py"))
    return os.path.join(tool, "run.py")


def entries(tmp: str) -> List[Tuple[List[str], List[str]]]:
    """Every way the warm call is started, each with what that way imports before the tool's code runs (``-m``
    imports runpy, which imports contextlib: the interpreter's cost, not the warm path's)."""
    script = os.path.join(os.path.dirname(sys.executable), "ensure-flydsl")
    if not os.path.isfile(script):
        pytest.fail(f"{script}: the test's environment has the tool installed (pip install -e '.[test]')")
    python = sys.executable
    return [([python, "-m", "ensure_flydsl"], [python, "-c", "import runpy"]),
            ([python, script], [python, "-c", "pass"]),
            ([python, "-E", "-S", geak_launcher(tmp)], [python, "-E", "-S", "-c", "pass"])]


def test_the_warm_call_imports_only_what_it_reads(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    assert ws.run().returncode == 0
    for entry, before in entries(str(tmp_path)):
        for args in ((), ("--json",)):
            modules = imported(ws, [*entry, *args]) - imported(ws, before)
            assert "ensure_flydsl.pipeline.warm" in modules, entry  # it was the warm path
            banned = NOT_WARM if args else NOT_WARM | NOT_WARM_PLAIN  # json imports re, enum, functools
            heavy = {m for m in modules if m in banned or m.split(".")[0] in banned}
            assert not heavy, f"{' '.join(entry[1:])} {' '.join(args)}: the warm call imported {sorted(heavy)}"
