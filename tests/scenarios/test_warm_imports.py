"""The warm call imports only what it reads (issue 28, item 7): none of the modules a full run, a parser or a
record library would bring.  Each was measured (benchmarks/geak_folder.py, `python -X importtime`): dataclasses
with inspect cost more instructions than the interpreter's own start; argparse and its translations a sixth of
the call."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.workspace import Workspace

# Never on the warm path: what a full run (processes, threads, locks, copies), a parser or dataclasses import.
NOT_WARM = {"dataclasses", "inspect", "argparse", "gettext", "subprocess", "threading", "shutil", "filelock",
            "packaging", "tempfile", "hashlib", "ensure_flydsl.pipeline.run", "ensure_flydsl.pipeline.provision"}


def imported(ws: Workspace, *args: str) -> set:
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "ensure_flydsl", *args], env=ws.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False, cwd=os.getcwd())
    assert out.returncode == 0, out.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}


def test_the_warm_call_imports_only_what_it_reads(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    for args in ((), ("--json",)):
        modules = imported(ws, *args)
        assert "ensure_flydsl.pipeline.warm" in modules  # it was the warm path
        heavy = {m for m in modules if m in NOT_WARM or m.split(".")[0] in NOT_WARM}
        assert not heavy, f"the warm call imported {sorted(heavy)}"
