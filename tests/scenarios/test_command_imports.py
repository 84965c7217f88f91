"""Each command imports what it uses (issue 27, item 7: most of a short command's CPU was importing the modules of
every way): a source run with no cache imports no binary cache, release or cache way; status and wait (what
pollers call) no pipeline, way, probe, source or store, nor a parser, typing or dataclasses; a run that takes no
lock no filelock; the watchdog none of that and no run records until the run has ended; clean neither the ways it
does not undo nor the cache.  benchmarks/cold_imports.py measures what each command costs."""

from __future__ import annotations

import sys
from typing import Iterable, Set

from tests.helpers.workspace import Workspace
from tests.scenarios.test_warm_imports import imported

NO_CACHE_RUN = ("ensure_flydsl.binary_cache", "ensure_flydsl.ways.release", "ensure_flydsl.ways.cache")
POLLER = ("ensure_flydsl.pipeline", "ensure_flydsl.ways", "ensure_flydsl.probe", "ensure_flydsl.source",
          "ensure_flydsl.binary_cache", "ensure_flydsl.host_store", "ensure_flydsl.doctor")
POLLER_STDLIB = ("ensure_flydsl.support.processes",)
CLEAN = ("ensure_flydsl.binary_cache", "ensure_flydsl.ways.release", "ensure_flydsl.ways.cache",
         "ensure_flydsl.doctor", "ensure_flydsl.host_store", "ensure_flydsl.ways.source.tools")


def under(modules: Set[str], packages: Iterable[str]) -> Set[str]:
    return {m for m in modules for p in packages if m == p or m.startswith(p + ".")}


def test_each_command_imports_what_it_uses(ws: Workspace) -> None:
    cold = imported(ws, [sys.executable, "-m", "ensure_flydsl"])
    assert "ensure_flydsl.pipeline.provision" in cold  # it was a cold run (a source build of the fixture)
    assert not under(cold, NO_CACHE_RUN), sorted(under(cold, NO_CACHE_RUN))
    assert "filelock" in cold  # it took the build lock
    # A run that takes no lock (--verify of a good tree) does not load filelock (pipeline/lock.py: _make_lock).
    verified = imported(ws, [sys.executable, "-m", "ensure_flydsl", "--verify"])
    assert "ensure_flydsl.pipeline.run" in verified and "filelock" not in verified
    for command in (["status"], ["status", "--json"], ["wait", "--timeout", "0"], ["wait", "--timeout", "0", "--json"]):
        modules = imported(ws, [sys.executable, "-m", "ensure_flydsl", *command])
        assert "ensure_flydsl.runs.answer" in modules
        assert not under(modules, POLLER), (command, sorted(under(modules, POLLER)))
        assert not under(modules, POLLER_STDLIB), (command, sorted(under(modules, POLLER_STDLIB)))
    # The watchdog (one per run that provisions) waits with the layout alone: here the run it is given has no
    # alive file, so it ends where it would start waiting (runs/watchdog.py).
    watchdog = imported(ws, [sys.executable, "-m", "ensure_flydsl", "_watchdog", ws.root, "20260101-000000-000000"])
    assert "ensure_flydsl.runs.watchdog" in watchdog
    light = (*POLLER, *POLLER_STDLIB, "ensure_flydsl.runs.records", "ensure_flydsl.runs.liveness")
    assert not under(watchdog, light), sorted(under(watchdog, light))
    cleaned = imported(ws, [sys.executable, "-m", "ensure_flydsl", "clean"])
    assert "ensure_flydsl.cli.clean" in cleaned
    assert not under(cleaned, CLEAN), sorted(under(cleaned, CLEAN))
