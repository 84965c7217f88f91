"""A FIFO where the tool keeps one of its own files (a mistaken `mkfifo`, or a hostile local process) is not
read: every reader opens without blocking and takes only a regular file (support/files.py: read_regular).
Before, `ensure` hung in its warm path on a FIFO at the env file or its twin.  Real processes, each bounded
by a timeout that a blocking open would exceed."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.workspace import Workspace


def replace_with_fifo(path: str) -> None:
    os.unlink(path)
    os.mkfifo(path)


@pytest.mark.parametrize("which", ["env file", "twin"])
def test_a_fifo_at_the_env_file_or_its_twin_is_not_waited_for(ws: Workspace, which: str) -> None:
    assert ws.run().returncode == 0
    replace_with_fifo(ws.env_file if which == "env file" else ws.env_json)
    out = ws.run("--json", timeout=60)  # a blocking open would wait for a writer for ever
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ok"] is True
    for path in (ws.env_file, ws.env_json):  # written anew, atomically, over the FIFO
        assert os.path.isfile(path) and not os.path.islink(path)
    again = ws.run("--json", timeout=60)
    assert again.returncode == 0 and json.loads(again.stdout)["action"] == "warm", again.stdout


def test_a_fifo_at_a_running_runs_alive_file_is_not_waited_for(ws: Workspace) -> None:
    """`status` and `wait` ask whether a "running" run lives by a shared flock of its alive file: they opened it
    blocking, and hung for ever (no heartbeat either) on a FIFO there."""
    assert ws.run().returncode == 0
    folder = os.path.join(ws.base, ".ensure_flydsl", "runs", "FlyDSL")
    [name] = [n for n in os.listdir(folder) if n.endswith(".json")]
    with open(os.path.join(folder, name)) as handle:
        record = json.load(handle)
    record.update(run_id="20261207-161500-abcdef", state="running", finished=None, result=None, build_pgid=None)
    with open(os.path.join(folder, record["run_id"] + ".json"), "w") as handle:
        json.dump(record, handle)
    os.mkfifo(os.path.join(folder, record["run_id"] + ".alive"))
    for args in (("status", "--json"), ("wait", "--timeout", "1", "--json")):
        out = ws.run(*args, timeout=30)  # a blocking open would wait for a writer for ever
        assert out.returncode == 0 and json.loads(out.stdout)["state"] == "succeeded", out.stdout + out.stderr
