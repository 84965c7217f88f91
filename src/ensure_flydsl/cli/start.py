"""``ensure`` (blocking), ``doctor``, and ``start``: it joins the request's live run or launches a worker (``_worker``),
holding the worker's alive lock until the worker has it (a ``wait`` issued at once sees a live run)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, Mapping, Optional

from ensure_flydsl.cli import Call
from ensure_flydsl.doctor.diagnose import diagnose
from ensure_flydsl.errors import EnsureError, ExitCode, Stage, disk_full_error
from ensure_flydsl.layout import start_lock_file
from ensure_flydsl.pipeline.decide import check_reuse, preflight
from ensure_flydsl.pipeline.publish import withdraw_stale_markers
from ensure_flydsl.pipeline.run import ensure, ensure_run
from ensure_flydsl.pipeline.warm import warm_lines
from ensure_flydsl.probe.interpreter import callers_folder
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.answer import answer
from ensure_flydsl.runs.liveness import leave_failure_marker
from ensure_flydsl.runs.markers import Failure, installed
from ensure_flydsl.runs.progress import launch_watchdog
from ensure_flydsl.runs.records import RUNNING, RunStore, new_record, new_run_id
from ensure_flydsl.settings import Settings, Strategy
from ensure_flydsl.support.files import LockBusy, held_lock
from ensure_flydsl.support.launcher import command, passed_on, tool_command
from ensure_flydsl.support.processes import spawn, stop_signals_blocked
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.ways.context import Run, announced_eta

JOIN_PID_WAIT_S = 2.0


def ensure_command(call: Call, settings: Settings) -> int:
    """Answer warm when nothing changed, else run the pipeline; say what it decided."""
    result, warm = ensure(settings, call.environ, call.reporter, call.warm_key)
    said = warm_lines(settings, result)
    if warm:
        call.reporter.say(said[0])
    if call.as_json:
        print(result_json(result.to_json()))
    else:
        call.reporter.say(said[1])
    return 0


def doctor(call: Call, settings: Settings) -> int:
    """Exit 0 when the configured strategy can succeed (or a reusable FlyDSL is there), else the first stop's code."""
    diagnosis = diagnose(settings, call.environ, reuse=check_reuse)
    print(diagnosis.report(settings, call.as_json))
    return diagnosis.exit_code


def settings_from_json(text: str) -> Settings:
    """The worker's copy of the settings (Settings.to_json): JSON's lists back to tuples."""
    data: Dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(text).items()}
    data.update(strategy=Strategy(data["strategy"]), git_mirrors=tuple(tuple(pair) for pair in data["git_mirrors"]))
    return Settings(**data)


def worker(call: Call) -> int:
    """The detached worker: a full run (not the warm path), whose record shows how it ended; stdout is the log."""
    given, reporter = call.args.given, call.reporter
    run = Run(settings_from_json(given["--settings-json"]), reporter, call.environ, given["--run-id"],
              kind="detached", alive_fd=int(given["--alive-fd"]))
    result = ensure_run(run)
    reporter.say(f"ready: flydsl {result.version} ({result.how}) for {result.python}; source {result.env_file}")
    return 0


def _started(settings: Settings, run_id: str, pid: Optional[int], log: str, *, joined: bool) -> Dict[str, object]:
    """start's answer: ok (exit 0) once the run is launched or joined; `wait` answers whether FlyDSL is ready."""
    what = "joined the run already going" if joined else "launched a detached run"
    return result_object(ok=True, exit_code=0, reason=f"{what} for this request", log=log, run_id=run_id,
                         hint=f"run `{command('wait --timeout 540')}` (again while it exits 75)", elapsed_s=None,
                         pid=pid, state=RUNNING, joined=joined, root=settings.root,
                         installed=installed(settings.root, settings.request(), os.environ.get("PATH")))


def start(call: Call, settings: Settings) -> int:
    environ, reporter = call.environ, call.reporter
    preflight(settings, environ)
    store = RunStore(settings.root)
    store.ensure_folder()
    # Sixteen agents calling `start` at once: one launches, the others join it.
    try:
        with held_lock(start_lock_file(store.folder), timeout=settings.lock_timeout, say=reporter.say,
                       what="the lock of `start`"):
            return _join_or_launch(settings, environ, reporter, store)
    except LockBusy as exc:
        raise EnsureError(ExitCode.LOCK, str(exc), stage=Stage.STARTING,
                          hint="another `start` for this root hangs: end it, or raise FLYDSL_LOCK_TIMEOUT") from None


def _join_or_launch(settings: Settings, environ: Mapping[str, str], reporter: Reporter, store: RunStore) -> int:
    running = answer(settings).record  # the live run first, if any
    if running is not None and running.state == RUNNING:  # one `start` announced has no pid until its worker writes it
        deadline = time.monotonic() + JOIN_PID_WAIT_S
        while running.pid is None and time.monotonic() < deadline:
            time.sleep(0.02)
            running = store.read(running.run_id) or running
        print(result_json(_started(settings, running.run_id, running.pid, running.log, joined=True)))
        return 0
    withdraw_stale_markers(settings, reporter.say)
    run_id = new_run_id()
    alive_fd = store.hold_alive(run_id)
    try:
        log = _announce(settings, environ, store, run_id)
    except OSError as exc:
        # Nothing may say that a run is going: not its record, not its alive file (each written whole or not).
        os.close(alive_fd)
        store.forget(run_id)
        full = disk_full_error(exc, Stage.STARTING)
        if full is None:
            raise
        # The failure marker of a run that could not start; the error says so when the marker failed too.
        failure = Failure(full.stage, int(full.code), full.reason, full.hint)
        unseen = leave_failure_marker(settings.fail_marker, failure, request=settings.request(), run_id=run_id,
                                      locked=False, log=settings.log_file, log_tail=[], path_env=environ.get("PATH"))
        raise (full if unseen is None else full.amended(reason=f"{full.reason}; {unseen}")) from None
    cmd = [*tool_command(), "_worker", "--run-id", run_id, "--alive-fd", str(alive_fd),
           "--settings-json", json.dumps(settings.to_json())]
    try:
        # In the caller's folder, as the probe runs (a pyenv or asdf shim picks the interpreter from it).
        with stop_signals_blocked():  # the worker unblocks them once its record can say how it ended
            proc = spawn(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=passed_on(environ),
                         own_group=True, pass_fds=(alive_fd,), cwd=callers_folder())
        launch_watchdog(store.root, run_id, environ)  # from the first moment: a worker killed at once is noticed too
    finally:
        os.close(log)
        os.close(alive_fd)  # the worker holds its own copy of the locked descriptor
    print(result_json(_started(settings, run_id, proc.pid, settings.log_file, joined=False)))
    proc.returncode = 0  # not ours to reap: it outlives this process by design
    return 0


def _announce(settings: Settings, environ: Mapping[str, str], store: RunStore, run_id: str) -> int:
    """Open the worker's log and announce the run, so that a `wait` issued the moment we return follows it."""
    os.makedirs(settings.base_dir, exist_ok=True)
    # As Reporter.open_log: never append to (or chmod) the target of a symlink planted at the log's path.
    log = os.open(settings.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.fchmod(log, 0o644)
        announced = new_record(store, run_id, request=settings.request(), fail_marker=settings.fail_marker,
                               log=settings.log_file, kind="detached", pid=None, step=Stage.STARTING,
                               path_env=environ.get("PATH"))
        announced.eta_s = announced_eta(settings, environ)  # the likeliest route's, from the host's history
        store.write(announced)
        store.set_current(run_id)
    except BaseException:
        os.close(log)
        raise
    return log

