"""Detached runs for agents: ``start`` launches a worker in a session of its own and returns at once.

``start`` validates the request (bad input is exit 64 here, not a silent worker failure), takes any
success marker that does not answer this request out of the way, and either joins the live run for the
same request or launches a worker.  The worker's alive lock is taken by ``start`` itself and handed to the
worker, so a ``wait`` issued the moment ``start`` returns already sees a live run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Mapping

import filelock

from ensure_flydsl.cli.worker import settings_to_json
from ensure_flydsl.pipeline.decide import preflight
from ensure_flydsl.pipeline.publish import withdraw_stale_markers
from ensure_flydsl.runs.answer import live_runs
from ensure_flydsl.runs.records import RUNNING, RunRecord, RunStore, new_record, new_run_id
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter

JOIN_PID_WAIT_S = 2.0


def _with_pid(store: RunStore, record: RunRecord) -> RunRecord:
    """A run announced by `start` a moment ago has no pid in its record until its worker writes it."""
    deadline = time.monotonic() + JOIN_PID_WAIT_S
    while record.pid is None and time.monotonic() < deadline:
        time.sleep(0.02)
        record = store.read(record.run_id) or record
    return record


def start(settings: Settings, environ: Mapping[str, str], reporter: Reporter) -> int:
    preflight(settings, environ)
    store = RunStore(settings.root)
    store.ensure_folder()
    # Sixteen agents calling `start` at once: one launches, the others join it.
    with filelock.FileLock(os.path.join(store.folder, "start.lock")):
        return _join_or_launch(settings, environ, reporter, store)


def _join_or_launch(settings: Settings, environ: Mapping[str, str], reporter: Reporter, store: RunStore) -> int:
    live = live_runs(store, settings.request())
    if live:
        running = _with_pid(store, live[0])
        print(json.dumps({"run_id": running.run_id, "pid": running.pid, "log": running.log,
                          "state": RUNNING, "joined": True}))
        return 0
    withdraw_stale_markers(settings, reporter.say)
    run_id = new_run_id()
    alive_fd = store.hold_alive(run_id)
    os.makedirs(settings.base_dir, exist_ok=True)
    # As Reporter.open_log: never append to (or chmod) the target of a symlink planted at the log's path.
    log = os.open(settings.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.fchmod(log, 0o644)
    # Announce the run before the worker exists, so that `wait` and `status` issued the moment we return
    # follow it.  Only the worker writes its record after this: no stale write can overwrite its end.
    store.write(new_record(store, run_id, request=settings.request(), fail_marker=settings.fail_marker,
                           log=settings.log_file, kind="detached", pid=None, step="starting"))
    store.set_current(run_id)
    cmd = [sys.executable, "-m", "ensure_flydsl", "_worker", "--run-id", run_id, "--alive-fd", str(alive_fd),
           "--settings-json", json.dumps(settings_to_json(settings))]
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(environ), start_new_session=True, pass_fds=(alive_fd,), cwd="/")
    finally:
        os.close(log)
        os.close(alive_fd)  # the worker holds its own copy of the locked descriptor
    print(json.dumps({"run_id": run_id, "pid": proc.pid, "log": settings.log_file, "state": RUNNING,
                      "joined": False}))
    proc.returncode = 0  # not ours to reap: it outlives this process by design
    return 0
