"""The watchdog's process (``_watchdog ROOT RUN_ID``, started beside each run that provisions: runs/progress.py).

It waits on the run's alive flock with nothing loaded but the layout, and loads what judges a death
(:mod:`ensure_flydsl.runs.liveness`) only once the flock is free.  A run that records its own end stops its
watchdog before it lets go of the flock (``Tracker.close``), so most watchdogs end in the wait: one that
loaded the run records first spent about 25 ms of CPU on every provisioning run for nothing.
"""

from __future__ import annotations

import fcntl
import os

from ensure_flydsl.layout import run_alive_file, runs_dir
from ensure_flydsl.runs.liveness import judge_end


def watch(root: str, run_id: str) -> int:
    """Block until the run's alive flock is free; then a record that still says "running" is a death."""
    try:
        fd = os.open(run_alive_file(runs_dir(root), run_id), os.O_RDONLY | os.O_NOFOLLOW)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        finally:
            os.close(fd)
    except OSError:
        return 0

    judge_end(root, run_id)
    return 0
