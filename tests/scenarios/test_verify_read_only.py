"""``ensure --verify`` and ``FLYDSL_VERIFY=1`` verify a good tree without the lock and without writing
(issue 19, item 9), as ``verify`` does: here on a read-only mount of the root's folder."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Iterator

import pytest

from tests.helpers.other_user import read_only_bind
from tests.helpers.workspace import Workspace


@pytest.fixture
def read_only_ws(ws: Workspace) -> Iterator[Workspace]:
    """The workspace with a good tree, then its base folder mounted read-only over itself."""
    if os.geteuid() != 0:
        pytest.skip(f"a read-only bind mount needs root; this runs as uid {os.geteuid()}")
    assert ws.run().returncode == 0
    why = read_only_bind(ws.base, ws.base)
    if why is not None:
        pytest.skip(why)
    try:
        yield ws
    finally:
        subprocess.run(["umount", ws.base], check=True)


def listing(folder: str) -> list:  # type: ignore[type-arg]
    return sorted((os.path.join(d, n), os.lstat(os.path.join(d, n)).st_mtime_ns)
                  for d, ds, fs in os.walk(folder) for n in ds + fs)


@pytest.mark.parametrize("how", [("--verify",), ("FLYDSL_VERIFY=1",)], ids=["--verify", "FLYDSL_VERIFY=1"])
def test_a_good_tree_is_verified_on_a_read_only_root(read_only_ws: Workspace, how: tuple) -> None:  # type: ignore[type-arg]
    ws = read_only_ws
    before = listing(ws.base)
    args = ["--json"] + [a for a in how if a.startswith("--")]
    env = dict(a.split("=", 1) for a in how if "=" in a)
    out = ws.run(*args, **env)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["action"] == "verified" and "probe" in result["durations"]
    assert listing(ws.base) == before  # nothing written, no lock file touched


def test_verify_on_a_read_only_root_still_works(read_only_ws: Workspace) -> None:
    """The control: the probe command alone never needed to write."""
    out = read_only_ws.run("verify")
    assert out.returncode == 0, out.stdout + out.stderr
