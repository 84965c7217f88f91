"""The warm call is the front door's alone (ensure_flydsl/warm.py): whichever way it is started (``python -m
ensure_flydsl``, the installed command, the GEAK folder's unpacked zipapp under ``python3 -E -S``), it imports at most
three of the tool's modules (the package, its ``__main__`` and warm.py) and none of the standard library's heavier
modules: the stamp holds the answer's JSON as text, so not even ``json`` (which brings ``re`` and ``enum``)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from typing import List, Set, Tuple

import pytest

import ensure_flydsl
from tests.helpers.workspace import Workspace

FRONT_DOOR = {"ensure_flydsl", "ensure_flydsl.__main__", "ensure_flydsl.warm"}
NOT_WARM = {"json", "re", "enum", "typing", "dataclasses", "subprocess", "threading", "shutil", "argparse",
            "tempfile", "hashlib"}
PACKAGE = os.path.dirname(os.path.abspath(ensure_flydsl.__file__))
TEMPLATE = os.path.join(PACKAGE, "geak", "templates", "__main__.py.in")


def imported(ws: Workspace, argv: List[str]) -> Set[str]:
    out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=ws.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, check=False, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}


def geak_launcher(folder: str) -> str:
    """The GEAK folder's zipapp: this package and the entry ``ensure-flydsl skill`` writes from its template
    (the vendored libraries are left out: the warm call must not need them)."""
    zipapp = os.path.join(folder, "ensure_flydsl.pyz")
    with zipfile.ZipFile(zipapp, "w") as archive:
        archive.write(TEMPLATE, "__main__.py")
        for current, dirs, names in os.walk(PACKAGE):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                path = os.path.join(current, name)
                archive.write(path, os.path.join("ensure_flydsl", os.path.relpath(path, PACKAGE)))
    return zipapp


def unpacked(ws: Workspace, zipapp: str) -> str:
    """The copy of the zipapp its first run unpacks into the cache folder, whose __main__.py ensure_flydsl.sh
    runs from then on."""
    assert subprocess.run([sys.executable, "-E", "-S", zipapp], env=ws.env, stdout=subprocess.DEVNULL,
                          check=False).returncode == 0
    with open(zipapp, "rb") as handle:
        sha = hashlib.sha256(handle.read()).hexdigest()
    return os.path.join(ws.env["XDG_CACHE_HOME"], "ensure-flydsl", "zipapp", sha, "__main__.py")


def entries(ws: Workspace, tmp: str) -> List[Tuple[List[str], List[str]]]:
    """Every way the warm call is started, each with what that way imports before the tool's code runs (``-m``
    imports runpy, which imports contextlib: the interpreter's cost, not the warm path's)."""
    script = os.path.join(os.path.dirname(sys.executable), "ensure-flydsl")
    if not os.path.isfile(script):
        pytest.fail(f"{script}: the test's environment has the tool installed (pip install -e '.[test]')")
    python = sys.executable
    return [([python, "-m", "ensure_flydsl"], [python, "-c", "import runpy"]),
            ([python, script], [python, "-c", "pass"]),
            ([python, "-E", "-S", unpacked(ws, geak_launcher(tmp))], [python, "-E", "-S", "-c", "pass"])]


def test_the_warm_call_imports_only_the_front_door(ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    assert ws.run().returncode == 0
    for entry, before in entries(ws, str(tmp_path)):
        for args in ((), ("--json",)):
            modules = imported(ws, [*entry, *args]) - imported(ws, before)
            ours = {m for m in modules if m.split(".")[0] == "ensure_flydsl"}
            assert ours <= FRONT_DOOR and "ensure_flydsl.warm" in ours, f"{' '.join(entry[1:])} {args}: {sorted(ours)}"
            heavy = {m for m in modules if m.split(".")[0] in NOT_WARM}
            assert not heavy, f"{' '.join(entry[1:])} {' '.join(args)}: the warm call imported {sorted(heavy)}"
