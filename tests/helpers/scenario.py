"""Steps many scenarios share: wait for a file, check one tree, kill at a fault point, start and status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Dict

from tests.helpers.workspace import Workspace


def wait_for(path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.02)


def assert_one_tree(ws: Workspace, python: str = sys.executable) -> None:
    out = ws.source_and_import(python)
    assert out.returncode == 0, out.stderr
    flydsl_file, kernel_file, _version = out.stdout.splitlines()
    assert flydsl_file == os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "__init__.py")
    assert kernel_file == os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")


def killed_at(ws: Workspace, point: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(ws.env, ENSURE_FLYDSL_FAULT=point, **env)
    return subprocess.run(ws.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, timeout=120)


def assert_finished_build_of(ws: Workspace, commit: str) -> None:
    twin = ws.env_twin()
    assert twin["commit"] == commit and twin["how"] == "built"
    assert_one_tree(ws)


def status(ws: Workspace, *args: str, **env: str) -> Dict[str, object]:
    out = ws.run("status", "--json", *args, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data, dict)
    return data


def start(ws: Workspace, *args: str, **env: str) -> Dict[str, object]:
    out = ws.run("start", *args, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    assert isinstance(data, dict)
    return data


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
