"""A release run downloads the wheel beside git's fetch of the pin (issue 13): started as soon as the
remote's refs say the pin is a release's commit, taken over by the release step, and stopped and removed
when the run goes no further (a module the interpreter lacks); nothing of it outlives the run."""

from __future__ import annotations

import json
import os
from typing import Dict, List

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.release_fixture import MISSING_MODULE, make_release_repo
from tests.helpers.scenario import assert_one_tree
from tests.helpers.workspace import Workspace

pytestmark = pytest.mark.index  # the real flydsl wheel from the package index


def offline(wheelhouse: str, repo: FixtureRepo) -> Dict[str, str]:
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse, "FLYDSL_STRATEGY": "release",
            "FLYDSL_PIN": "v0.2.2", "FLYDSL_REPO": repo.url}


def messages(stderr: str) -> List[str]:
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    return [e["text"] for e in events if e.get("event") == "message"]


def pip_downloads_of(root: str) -> List[int]:
    """Live `pip download` processes writing under ``root``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                args = handle.read().split(b"\0")
        except OSError:
            continue
        if b"download" in args and any(root.encode() in a for a in args):
            found.append(int(pid))
    return found


def test_the_wheel_is_downloaded_beside_the_fetch_and_taken_over(ws: Workspace, wheelhouse: str,
                                                                  tmp_path: "os.PathLike[str]") -> None:
    repo = make_release_repo(os.path.join(str(tmp_path), "upstream", "FlyDSL.git"), wheelhouse)
    out = ws.run("--json", **offline(wheelhouse, repo))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released"
    said = messages(out.stderr)
    started = said.index("release v0.2.2: downloading the flydsl==0.2.2 wheel while the pin is fetched")
    checked_out = next(i for i, text in enumerate(said) if text.startswith("checked out "))
    taken = said.index("release v0.2.2: taking the flydsl==0.2.2 wheel downloaded beside the fetch")
    assert started < checked_out < taken  # started before the checkout, used by the release step
    assert not any(text.startswith("release v0.2.2: downloading the flydsl==0.2.2 wheel for") for text in said)
    assert not os.path.exists(os.path.join(ws.root, ".ensure_flydsl", "wheel-download"))
    assert not os.path.exists(os.path.join(ws.root, "build-fly", ".wheel-download"))
    assert_one_tree(ws)


def test_a_run_the_requirements_stop_leaves_no_download(ws: Workspace, wheelhouse: str,
                                                         tmp_path: "os.PathLike[str]") -> None:
    repo = make_release_repo(os.path.join(str(tmp_path), "upstream", "FlyDSL.git"), wheelhouse,
                             kernel_extra=f"import {MISSING_MODULE}\n")
    out = ws.run("--json", **offline(wheelhouse, repo))
    assert out.returncode == 6, out.stderr
    assert ws.marker()["stage"] == "requirements"
    assert MISSING_MODULE in str(ws.marker()["reason"])
    assert not os.path.exists(os.path.join(ws.root, ".ensure_flydsl", "wheel-download"))
    assert not os.path.exists(os.path.join(ws.root, "build-fly"))  # nothing installed, nothing staged
    assert pip_downloads_of(ws.root) == []
