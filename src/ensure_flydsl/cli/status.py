"""``ensure-flydsl status``: what is true for the request now (runs/answer.py); ``wait``: the same, once the run
ends (0, its failure's code) or at ``--timeout`` (75), with heartbeat lines for an agent's silence detector."""

from __future__ import annotations

import json
import time
from typing import Dict, Optional

from ensure_flydsl.errors import ExitCode
from ensure_flydsl.result import result_object
from ensure_flydsl.runs.answer import Answer, answer
from ensure_flydsl.runs.markers import installed_line, read_failure_marker, tail_of
from ensure_flydsl.runs.progress import Pulse, say_pulse
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter, fmt_seconds, known

ABSENT_EXIT = 1  # `wait` and `env` when nothing answers the request
POLL_S = 0.05


def exit_code_of(found: Answer) -> int:
    """What `wait --timeout 0` returns for this answer: 0, the failure's code, 75 running, 1 absent."""
    if found.state == SUCCEEDED:
        return 0
    if found.state == RUNNING:
        return int(ExitCode.STILL_RUNNING)
    if found.state == FAILED and found.failure is not None:
        return found.failure.exit_code
    return ABSENT_EXIT


def answer_object(settings: Settings, found: Answer) -> Dict[str, object]:
    """The result object of an answer (docs/schema/status.schema.json)."""
    record, twin, failure = found.record, found.twin, found.failure
    data = result_object(ok=found.state == SUCCEEDED, exit_code=exit_code_of(found), log=settings.log_file,
                         run_id=found.run_id, elapsed_s=found.elapsed_s, hint=found.hint or None)
    data.update(state=found.state, step=None, percent=None, eta_s=None, pid=None, root=settings.root, python=None,
                waiting_for=None, installed=found.installed)
    if record is not None:
        data["pid"] = record.pid
        data["log"] = record.log or settings.log_file
    if found.state == RUNNING and record is not None:
        data.update(step=record.step, percent=record.percent, eta_s=record.remaining_eta(),
                    waiting_for=record.waiting, reason=f"run {record.run_id} is at step {record.step}",
                    hint="run `ensure-flydsl wait --timeout 540` again until it exits with something else than 75")
    elif found.state == SUCCEEDED and twin is not None:
        data.update(version=twin.version, python=twin.python, how=twin.how, built=twin.built,
                    env_file=settings.env_file, eta_s=0,
                    reason=f"{settings.env_file} answers this request: flydsl {twin.version} ({twin.how}) for "
                           f"{twin.python}")
    elif found.state == FAILED and failure is not None:
        data.update(stage=failure.stage, reason=failure.reason)
    else:
        data["reason"] = found.reason
    return data


def status(settings: Settings, *, as_json: bool) -> int:
    """A pure query: nothing is written (a dead run is reported; its watchdog records it)."""
    data = answer_object(settings, answer(settings))
    if as_json:
        print(json.dumps(data, sort_keys=True))
        return 0
    print(f"state:   {data['state']}")
    if data["state"] == RUNNING:
        percent = f" {data['percent']}%" if data["percent"] is not None else ""
        print(f"step:    {known(data['step'], 'starting')}{percent}")
        print(f"elapsed: {fmt_seconds(_seconds(data['elapsed_s']))}  ETA: {fmt_seconds(_seconds(data['eta_s']))}")
        print(f"pid:     {known(data['pid'])} (run {known(data['run_id'])})")
        if isinstance(data["waiting_for"], dict):
            print(f"waiting: for {data['waiting_for'].get('text')} (the build lease in the cache)")
    elif data["state"] == SUCCEEDED:
        print(f"flydsl:  {known(data['version'])} ({known(data['how'])}) for {known(data['python'])}")
        print(f"env:     {known(data['env_file'])}")
    elif data["state"] == FAILED:
        print(f"failed:  exit {known(data['exit_code'])} in step {known(data['stage'])}: {known(data['reason'])}")
    elif data["reason"]:
        print(f"why:     {data['reason']}")
    installed = data.get("installed")
    if data["state"] != SUCCEEDED and isinstance(installed, dict):
        print(f"holds:   {installed_line(installed)}")
    if data["state"] in (FAILED, "absent") and data["hint"]:
        print(f"next:    {data['hint']}")
    print(f"root:    {data['root']}")
    print(f"log:     {known(data['log'], 'none yet')}")
    return 0


def _seconds(value: object) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) else None


def wait(settings: Settings, reporter: Reporter, *, timeout: Optional[float], heartbeat: float,
         as_json: bool = False) -> int:
    """Poll while a run for the request lives; a run found dead is recorded here, should its watchdog be gone."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    next_beat = started
    while True:
        found = answer(settings, record_deaths=True)
        if found.state != RUNNING or found.record is None:
            code = _finished(settings, found, reporter)
            break
        now = time.monotonic()
        if now >= next_beat:
            say_pulse(reporter, Pulse.of_record(found.record))  # the line a run's own heartbeat says
            next_beat = now + heartbeat
        if deadline is not None and now >= deadline:
            reporter.say(f"still running after {fmt_seconds(timeout)}; run `ensure-flydsl wait --timeout 540` "
                         "again (exit 75)")
            code = int(ExitCode.STILL_RUNNING)
            break
        time.sleep(POLL_S)
    if as_json:
        print(json.dumps(answer_object(settings, found), sort_keys=True))
    return code


def _finished(settings: Settings, found: Answer, reporter: Reporter) -> int:
    if found.state == SUCCEEDED:
        twin = found.twin
        what = (f"flydsl {known(twin.version)} ({known(twin.how)}) for {known(twin.python)}" if twin is not None
                else "the env file")
        reporter.say(f"succeeded: {what}; source {settings.env_file}")
        return 0
    there = found.installed
    if found.state == FAILED and found.failure is not None:
        failure = found.failure
        reporter.say(f"failed (exit {failure.exit_code}) in step {known(failure.stage)}: {known(failure.reason)}")
        marker = read_failure_marker(settings.fail_marker)
        log = found.record.log if found.record is not None else (marker.log if marker is not None else "")
        tail = list(marker.log_tail) if marker is not None and marker.run_id == found.run_id else None
        tail = tail or tail_of(log)
        if tail:
            reporter.say(f"last lines of the log ({log}):\n" + "\n".join("    " + str(t) for t in tail))
        if there is not None:
            reporter.say(installed_line(there))
        if found.hint:
            reporter.say(f"next: {found.hint}")
        return failure.exit_code
    reporter.say(f"nothing to wait for: {found.reason}; start a run with `ensure-flydsl start`")
    if there is not None:
        reporter.say(installed_line(there))
    return ABSENT_EXIT
