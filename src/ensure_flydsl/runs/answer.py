"""What is true for one request on one root now (``status``, ``wait``): running (a run for it lives), succeeded
(the env file answers it), failed (its last run did, or a failure marker names it), or absent."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import BadInput, ExitCode
from ensure_flydsl.result import result_object
from ensure_flydsl.runs.liveness import record_death, seen_dead
from ensure_flydsl.runs.markers import (
    EnvTwin,
    Failure,
    installed,
    installed_line,
    installed_twin,
    read_failure_marker,
    tail_of,
    twin_gap,
)
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED, RunRecord, RunStore, is_run_id, sibling_roots
from ensure_flydsl.runs.timings import newest_real
from ensure_flydsl.settings import Request, Settings
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.report import fmt_seconds, known

ABSENT = "absent"
ABSENT_EXIT = 1  # `wait`, `env` and `verify` when nothing answers the request


@dataclass
class Answer:
    state: str
    record: Optional[RunRecord] = None  # the live run, or the run whose outcome this is
    twin: Optional[EnvTwin] = None  # the env file's JSON twin, when succeeded
    failure: Optional[Failure] = None  # when failed
    reason: str = ""  # why absent
    run_id: Optional[str] = None  # the run the answer comes from
    elapsed_s: Optional[float] = None  # how long that run took (or has taken so far)
    installed: Optional[Dict[str, object]] = None  # what the root's env file holds now (markers.installed)
    hint: str = ""  # what to do next

    @property
    def exit_code(self) -> int:
        """What `wait --timeout 0` returns for it: 0, the failure's code, 75 running, 1 absent."""
        if self.state == SUCCEEDED:
            return 0
        if self.state == RUNNING:
            return int(ExitCode.STILL_RUNNING)
        return self.failure.exit_code if self.state == FAILED and self.failure is not None else ABSENT_EXIT

    def to_json(self, settings: Settings) -> Dict[str, object]:
        """Its result object (docs/schema/status.schema.json)."""
        record, twin, failure = self.record, self.twin, self.failure
        data = result_object(ok=self.state == SUCCEEDED, exit_code=self.exit_code, run_id=self.run_id,
                             log=(record.log if record is not None else "") or settings.log_file,
                             elapsed_s=self.elapsed_s, hint=self.hint or None)
        data.update(state=self.state, step=None, percent=None, eta_s=None, overdue_s=None,
                    pid=record.pid if record is not None else None, root=settings.root, python=None,
                    waiting_for=None, installed=self.installed)
        if self.state == RUNNING and record is not None:
            data.update(step=record.step, percent=record.percent, eta_s=record.remaining_eta(),
                        overdue_s=record.overdue_s, waiting_for=record.waiting,
                        reason=f"run {record.run_id} is at step {record.step}",
                        hint=f"run `{command('wait --timeout 540')}` again until it exits with something else than 75")
        elif self.state == SUCCEEDED and twin is not None:
            data.update(version=twin.version, python=twin.python, how=twin.how, built=twin.built,
                        env_file=settings.env_file, eta_s=0, reason=answers(settings, twin))
        elif self.state == FAILED and failure is not None:
            data.update(stage=failure.stage, reason=failure.reason)
        else:
            data["reason"] = self.reason
        return data

    def ending(self, settings: Settings) -> List[str]:
        """What `wait` says of a run that ended: how, the log's last lines, what the root holds, what to do next."""
        if self.state == SUCCEEDED:
            twin = self.twin
            what = (f"flydsl {known(twin.version)} ({known(twin.how)}) for {known(twin.python)}" if twin is not None
                    else "the env file")
            return [f"succeeded: {what}; source {settings.env_file}"]
        holds = [] if self.installed is None else [installed_line(self.installed)]
        failure = self.failure
        if self.state != FAILED or failure is None:
            return [f"nothing to wait for: {self.reason}; {self.hint or start_hint()}", *holds]
        marker = read_failure_marker(settings.fail_marker)
        log = self.record.log if self.record is not None else (marker.log if marker is not None else "")
        tail = list(marker.log_tail) if marker is not None and marker.run_id == self.run_id else None
        tail = tail or tail_of(log)
        lines = [f"failed (exit {failure.exit_code}) in step {known(failure.stage)}: {known(failure.reason)}"]
        if tail:
            lines.append(f"last lines of the log ({log}):\n" + "\n".join("    " + str(t) for t in tail))
        return [*lines, *holds, *([f"next: {self.hint}"] if self.hint else [])]


def status_lines(data: Mapping[str, Any]) -> List[str]:
    """``status`` in words, from its result object: a line per fact, each labelled."""
    lines = [f"state:   {data['state']}"]
    if data["state"] == RUNNING:
        percent = f" {data['percent']}%" if data["percent"] is not None else ""
        late = f" (overdue {fmt_seconds(data['overdue_s'])})" if data.get("overdue_s") else ""
        lines += [f"step:    {known(data['step'], 'starting')}{percent}",
                  f"elapsed: {fmt_seconds(data['elapsed_s'])}  ETA: {fmt_seconds(data['eta_s'])}"
                  f"{late}", f"pid:     {known(data['pid'])} (run {known(data['run_id'])})"]
        if isinstance(data["waiting_for"], dict):
            lines.append(f"waiting: for {data['waiting_for'].get('text')} (the build lease in the cache)")
    elif data["state"] == SUCCEEDED:
        lines += [f"flydsl:  {known(data['version'])} ({known(data['how'])}) for {known(data['python'])}",
                  f"env:     {known(data['env_file'])}"]
    elif data["state"] == FAILED:
        lines.append(f"failed:  exit {known(data['exit_code'])} in step {known(data['stage'])}: "
                     f"{known(data['reason'])}")
    elif data["reason"]:
        lines.append(f"why:     {data['reason']}")
    installed = data.get("installed")
    if data["state"] != SUCCEEDED and isinstance(installed, dict):
        lines.append(f"holds:   {installed_line(installed)}")
    if data["state"] in (FAILED, ABSENT) and data["hint"]:
        lines.append(f"next:    {data['hint']}")
    return [*lines, f"root:    {data['root']}", f"log:     {known(data['log'], 'none yet')}"]


def answers(settings: Settings, twin: EnvTwin) -> str:
    return f"{settings.env_file} answers this request: flydsl {twin.version} ({twin.how}) for {twin.python}"


def _in_speaking_order(records: Iterable[RunRecord]) -> List[RunRecord]:
    """Those of ``records`` still running, the one holding the build lock first, then the oldest."""
    return sorted((r for r in records if r.state == RUNNING), key=lambda r: (not r.locked, r.started))


def followed(settings: Settings, run_id: Optional[str] = None) -> Settings:
    """The settings ``status`` and ``wait`` answer for: the request of run ``run_id``, else (no request setting
    but the root: a plain ``wait`` in the next shell) the root's current run's, else the caller's own."""
    store = RunStore(settings.root)
    if run_id is None and any(f.name in settings.sources for f in fields(Request) if f.name != "root"):
        return settings
    record = store.current() if run_id is None else store.read(run_id) if is_run_id(run_id) else None
    if record is None or record.root != settings.root:
        if run_id is None:
            return settings
        raise BadInput("--run-id", run_id, f"the id of a run on {settings.root}, as `start` printed it")
    return replace(settings, **{f.name: getattr(record.request, f.name) for f in fields(Request) if f.name != "root"})


def answer(settings: Settings, *, record_deaths: bool = False) -> Answer:
    """What is true for the settings' request; ``record_deaths`` (``wait``) records a run found dead too."""
    found = _answer(settings, record_deaths=record_deaths)
    found.installed = installed(settings.root, settings.request(), os.environ.get("PATH"))
    record = found.record
    if record is not None and found.elapsed_s is None:
        end = record.finished if record.finished is not None else time.time()
        found.elapsed_s = round(end - record.started, 1)
    return found


def _answer(settings: Settings, *, record_deaths: bool) -> Answer:
    store = RunStore(settings.root)
    request = settings.request()
    mine = [r for r in store.records() if r.request == request]  # another request's run may be going too
    records = [record_death(store, r) if record_deaths else seen_dead(store, r)[0] for r in mine]
    live = _in_speaking_order(records)
    if live:
        return Answer(RUNNING, record=live[0], run_id=live[0].run_id)
    there = installed_twin(settings.root)
    gap = (twin_gap(there, request, os.environ.get("PATH")) if there is not None else
           "there is none: another request's run replaced it, or `clean` removed it")
    # The last to end: a run that gave up while another was alive ended first, and never hides the one that worked.
    last = max(records, key=lambda r: newest_real(r.finished or 0.0, time.time()), default=None)
    if there is not None and gap is None:
        if last is not None and last.state == SUCCEEDED:
            return Answer(SUCCEEDED, record=last, twin=there, run_id=last.run_id)
        return Answer(SUCCEEDED, twin=there, run_id=there.run_id or None, elapsed_s=there.elapsed_s)
    if last is not None and last.state == FAILED and last.failure is not None:
        return Answer(FAILED, record=last, failure=last.failure, run_id=last.run_id, hint=last.failure.hint)
    if last is not None:
        return Answer(ABSENT, record=last, run_id=last.run_id, reason=(
            f"run {last.run_id} succeeded for this request, but {settings.env_file} no longer answers it ({gap})"),
            hint=start_hint())
    marker = read_failure_marker(settings.fail_marker)
    if marker is not None and marker.failure is not None and marker.request == request:
        return Answer(FAILED, failure=marker.failure, run_id=marker.run_id, hint=marker.failure.hint)
    other = _in_speaking_order(store.any_alive())
    if other:  # started with other settings (FLYDSL_PIN=v0.2.2 start): not "nothing", and not a second build
        run = other[0]
        return Answer(ABSENT, reason=f"no run is going for this request on {settings.root}, but "
                      f"run {run.run_id} (pin {run.request.pin}) is, for another request",
                      hint=f"`{command('wait --run-id ' + run.run_id)}` follows it")
    reason = f"nothing was started for this request on {settings.root}"
    if there is not None:
        reason += f", and {settings.env_file} does not answer it ({gap})"
    return Answer(ABSENT, reason=reason, hint=start_hint())


def start_hint() -> str:
    return f"run `{command('start')}` (then `{command('wait --timeout 540')}`), or `{command()}`"


def marker_sharing(settings: Settings) -> Optional[Tuple[str, str]]:
    """When other roots of this folder report to the same failure marker (the default path): what that means, and
    the setting that fixes it."""
    sharing = [other for other in sibling_roots(settings.root)
               if any(r.fail_marker == settings.fail_marker for r in RunStore(other).records())]
    if not sharing:
        return None
    shown = ", ".join(sharing[:3]) + (" ..." if len(sharing) > 3 else "")
    own = os.path.join(settings.base_dir, ".flydsl_build." + os.path.basename(settings.root) + ".failed")
    return (f"the root(s) {shown} report to the same failure marker {settings.fail_marker}: a file poller of one "
            f"sees the other's failures", f"give each root its own FLYDSL_BUILD_FAILED, e.g. FLYDSL_BUILD_FAILED={own}")
