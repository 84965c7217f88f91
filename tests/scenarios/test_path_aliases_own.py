"""The failure marker and the lock may not alias the tool's own files beside the root (issue 19, item 14):
the host's ETA history (in the user's cache folder), a run record, the binary cache folder, the LLVM build
and its record.  Refused as the
other aliases are (tests/scenarios/test_path_aliases.py): exit 64, one line, nothing touched."""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

import pytest

from tests.helpers.workspace import Workspace
from tests.scenarios.test_path_aliases import one_line, snapshot


def _cases(ws: Workspace, cache: str) -> Dict[str, Tuple[List[str], Dict[str, str], str, str]]:
    """(flags, variables, the setting blamed, the text naming what it aliases)."""
    state = os.path.join(ws.base, ".ensure_flydsl")
    runs = os.path.join(state, "runs", "FlyDSL")
    record = sorted(os.path.join(runs, n) for n in os.listdir(runs) if n.endswith(".json"))[0]
    llvm = os.path.join(ws.base, "llvm-project")
    own = "the tool's own folder (run records); allowed: a path outside the tool's own files"
    host = ws.host_dir
    return {
        "marker is the ETA history": (["--fail-marker", os.path.join(host, "history.json")], {}, "--fail-marker=",
                                      f"lies inside {host}, the tool's own folder for this host (ETA history); "
                                      "allowed: a path outside the tool's own files"),
        "lock in the host's folder": (["--lock-file", os.path.join(host, "build.lock")], {}, "--lock-file=",
                                      f"lies inside {host}, the tool's own folder for this host"),
        "marker in the old history's place": (["--fail-marker", os.path.join(state, "history.json")], {},
                                              "--fail-marker=", f"lies inside {state}, {own}"),
        "marker is a run record": (["--fail-marker", record], {}, "--fail-marker=", f"lies inside {state}, {own}"),
        "lock is a run record": (["--lock-file", record], {}, "--lock-file=", f"lies inside {state}, {own}"),
        "marker in the cache": (["--fail-marker", os.path.join(cache, "entries.failed")], {"FLYDSL_CACHE": cache},
                                "--fail-marker=", f"lies inside FLYDSL_CACHE={cache!r} (the binary cache); allowed: "
                                "a path outside the cache"),
        "marker is the cache": ([], {"FLYDSL_CACHE": cache, "FLYDSL_BUILD_FAILED": cache}, "FLYDSL_BUILD_FAILED=",
                                "(the binary cache)"),
        "marker in the LLVM build": (["--fail-marker", os.path.join(llvm, "mlir_install", "llvm-commit.txt")], {},
                                     "--fail-marker=", f"lies inside {llvm}, the tool's LLVM build"),
        "lock is the LLVM record": (["--lock-file", os.path.join(ws.base, ".llvm-project.ensure-flydsl.json")], {},
                                    "--lock-file=", "the tool's record of its LLVM build"),
    }


CASES = ["marker is the ETA history", "lock in the host's folder", "marker in the old history's place",
         "marker is a run record", "lock is a run record", "marker in the cache",
         "marker is the cache", "marker in the LLVM build", "lock is the LLVM record"]


@pytest.mark.parametrize("case", CASES)
def test_a_marker_or_lock_on_the_tools_own_files_is_refused(ws: Workspace, case: str,
                                                           tmp_path: "os.PathLike[str]") -> None:
    cache = os.path.join(str(tmp_path), "cache")
    assert ws.run().returncode == 0
    assert ws.run("--verify", FLYDSL_CACHE=cache).returncode == 0  # the cache folder exists
    cases = _cases(ws, cache)
    assert sorted(cases) == sorted(CASES)
    flags, env, blamed, other = cases[case]
    before = snapshot(ws.base, cache)
    for command in ("ensure", "start", "clean", "status"):
        out = ws.run(command, *flags, FIXTURE_BUILD_FAIL="1", FLYDSL_PIN=ws.repo.commits["v0.2.3"], **env)
        assert out.returncode == 64, (command, out.stdout + out.stderr)
        line = one_line(out)
        assert line.startswith(f"ensure-flydsl: {blamed}") and other in line, line
        assert snapshot(ws.base, cache) == before, command
