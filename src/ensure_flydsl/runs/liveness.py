"""A dead run noticed and said: its alive file's flock is free while its record says "running".  Its watchdog
(in a session of its own) notices at once, ``wait`` if the watchdog died too; ``status`` only reads."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import Callable, List, Optional, Tuple

from ensure_flydsl.errors import ExitCode
from ensure_flydsl.runs import markers, timings
from ensure_flydsl.runs.markers import Failure
from ensure_flydsl.runs.records import FAILED, RUNNING, RunRecord, RunStore, process_start_time
from ensure_flydsl.settings import Request, host_id
from ensure_flydsl.support import space
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.processes import kill_group


def seen_dead(store: RunStore, record: RunRecord) -> Tuple[RunRecord, Optional[Failure]]:
    """The record, and the failure of a death newly seen: a "running" run whose alive lock is free failed, as its
    marker says it did before it was killed, else with exit 9, at its last sign of life."""
    if record.state != RUNNING or store.is_alive(record.run_id):
        return record, None
    record = store.read(record.run_id) or record  # it may have finished just now
    if record.state != RUNNING:
        return record, None
    said = markers.read_failure_marker(record.fail_marker) if record.fail_marker else None
    failure = said.failure if said is not None and said.run_id == record.run_id else None
    if failure is None:
        who = f"pid {record.pid}" if record.pid else "before it recorded its pid"
        reason = (f"the run's process ({who}) died without finishing, during step {record.step} "
                  "(killed: kill -9, the OOM killer, or the container stopped)")
        hint = f"run `{command('start')}` (or `{command()}`) again: it resumes where the dead run stopped"
        failure = Failure(record.step, int(ExitCode.WORKER_DIED), reason, hint)
    return replace(record, state=FAILED, finished=record.updated if record.updated is not None else time.time(),
                   failure=failure), failure


def record_death(store: RunStore, record: RunRecord) -> RunRecord:
    """Stop a dead run's build, write its failure marker (unless answered), record it failed (idempotent)."""
    dead, failure = seen_dead(store, record)
    if failure is None:
        return dead  # alive, or its record says how it ended (a run's own failure is never taken for its death)
    # Killed between its failure marker and its record: its marker and timing record are its own last words.
    own = failure.exit_code != ExitCode.WORKER_DIED
    pgid = dead.build_pgid  # its build's group, unless the leader's pid now belongs to another process
    if isinstance(pgid, int) and pgid > 1 and process_start_time(pgid) in (None, dead.build_leader_start):
        kill_group(pgid)
    store.release(dead.run_id)  # the room it kept for its last words: they are said here
    # The marker before the FAILED record: a `wait` that reads the record answers at once.  A poller of the
    # files alone must see the death as soon as `wait` does.
    unseen = None if own else leave_failure_marker(
        dead.fail_marker, failure, request=dead.request, run_id=dead.run_id, locked=dead.locked,
        log=dead.log or None, log_tail=markers.tail_of(dead.log), path_env=dead.path_env)
    if unseen is not None:  # the marker could not be written: the failure says so
        dead = replace(dead, failure=replace(failure, reason=f"{failure.reason}; {unseen}"))
    try:
        store.write(dead)
    except OSError as exc:
        if not space.is_full(exc):
            raise
        # A full disk: the death is still told (here, and by `status` from the free alive lock).
    # Its timing record (best effort): a killed run is the one a fleet most needs to see.
    if not own:
        timings.keep(os.environ, timings.of_dead_run(dead, host_id(os.environ)))
    return dead


def leave_failure_marker(path: str, failure: Failure, *, request: Request, run_id: str, locked: bool,
                         log: Optional[str], log_tail: List[str], path_env: Optional[str],
                         say: Callable[[str], None] = lambda _: None) -> Optional[str]:
    """The failure marker of a run that failed or died, unless another answers for it (its interpreter looked up on
    the run's PATH, ``path_env``); why a poller of the marker does not see it (it could not be written), or None."""
    if not os.path.isdir(os.path.dirname(path)):
        return None  # bad input about the marker's own folder: nothing may be created
    if not locked and any(r.run_id != run_id and r.request == request for r in RunStore(request.root).any_alive()):
        answered = "another run for this request is going and will answer"
    else:
        twin = markers.installed_twin(request.root)
        gap = markers.twin_gap(twin, request, path_env) if twin else ""
        answered = "the env file answers this request" if gap is None else ""
    if answered:
        say(f"not writing {path}: {answered}")
        return None
    try:
        markers.write_failure_marker(path, stage=failure.stage, exit_code=failure.exit_code, reason=failure.reason,
                                     hint=failure.hint, log=log, log_tail=log_tail, run_id=run_id, request=request)
    except OSError as exc:  # a full disk, a read-only folder: the run's failure is told all the same
        return markers.marker_unwritten(path, exc)
    return None


def watch(root: str, run_id: str) -> int:
    """The watchdog (``_watchdog ROOT RUN_ID``): once the run's alive flock is free, "running" is a death."""
    store = RunStore(root)
    store.is_alive(run_id, wait=True)
    record = store.read(run_id)
    if record is not None and record.state == RUNNING:
        record_death(store, record)
    return 0
