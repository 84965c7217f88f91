"""Progress of a provisioning run: named steps, percent parsed from build output, ETA, the run record.

A run that goes past its first probe is tracked: it writes a run record (see records.py), holds the record's
alive lock for its whole life, and starts a watchdog in a session of its own.  If the run dies without
finishing (kill -9 of its process group, the OOM killer), the watchdog's blocking flock returns at once:
it stops the orphaned build (its own process group) and writes the failure marker with exit 9, so even a
poller that only watches files learns of the death.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

from ensure_flydsl.errors import ExitCode
from ensure_flydsl.runs import markers
from ensure_flydsl.runs.records import FAILED, RUNNING, SOURCE_PLAN, SUCCEEDED, RunStore, process_start_time

_NINJA = re.compile(r"^\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: "[12/345] Building CXX object ..."
_MAKE = re.compile(r"^\s*\[\s*(\d{1,3})%\]")  # CMake's Makefiles: "[ 45%] Building CXX object ..."
RECORD_INTERVAL_S = 0.5
_WATCHDOGS: List["subprocess.Popen[bytes]"] = []


def parse_percent(line: str) -> Optional[float]:
    """The percent a build output line reports (ninja's [N/M] or make's [ P%]), or None."""
    match = _NINJA.match(line)
    if match:
        done, total = int(match.group(1)), int(match.group(2))
        return min(100.0, 100.0 * done / total) if total > 0 else None
    match = _MAKE.match(line)
    if match:
        return min(100.0, float(match.group(1)))
    return None


def estimate_eta(
    step: Optional[str], step_elapsed: float, percent: Optional[float], typical: Mapping[str, float],
    done: Sequence[str], plan: Sequence[str] = SOURCE_PLAN,
) -> Optional[float]:
    """Seconds left: the rest of the current step (from its percent when known, else its typical length),
    plus the typical length of each step of the plan still to come."""
    if step is None:
        return None
    if percent is not None and percent > 0:
        current = step_elapsed * (100.0 - percent) / percent
    else:
        current = max(0.0, typical.get(step, 0.0) - step_elapsed)
    later = plan[list(plan).index(step) + 1:] if step in plan else ()
    return current + sum(typical.get(s, 0.0) for s in later if s not in done)


def died_reason(record: Mapping[str, object]) -> str:
    return (
        f"the run's process (pid {record.get('pid')}) died without finishing, during step {record.get('step')} "
        "(killed: kill -9, the OOM killer, or the container stopped)"
    )


def mark_died(store: RunStore, record: Dict[str, object]) -> Dict[str, object]:
    """Record a dead run as failed with exit 9 and write the failure marker (idempotent).

    It ended when it last gave a sign of life, not when its death is noticed: a caller killed while it
    waited for the lock must not look newer than the run that went on to build.  Nor does such a caller
    write the marker while another run for its request lives: that run will answer for the request."""
    reason = died_reason(record)
    last_seen = record.get("updated")
    record.update(
        state=FAILED,
        finished=last_seen if isinstance(last_seen, (int, float)) else time.time(),
        failure={"stage": record.get("step"), "exit_code": int(ExitCode.WORKER_DIED), "reason": reason},
    )
    store.write(record)
    request = dict(record.get("request") or {})  # type: ignore[call-overload]
    if not record.get("locked") and store.others_alive(request, str(record.get("run_id"))):
        return record
    fail_marker = str(record.get("fail_marker") or "")
    if fail_marker and os.path.isdir(os.path.dirname(fail_marker)):
        markers.write_failure_marker(
            fail_marker, stage=str(record.get("step")), exit_code=int(ExitCode.WORKER_DIED), reason=reason,
            hint="run `ensure-flydsl start` (or `ensure-flydsl`) again: it resumes where the dead run stopped",
            log=str(record.get("log") or "") or None, log_tail=tail_of(str(record.get("log") or "")),
            run_id=str(record.get("run_id")), request=request,
        )
    return record


def tail_of(path: str, count: int = 20) -> List[str]:
    if not path:
        return []
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            return handle.read().decode(errors="replace").splitlines()[-count:]
    except OSError:
        return []


def kill_build_group(record: Mapping[str, object]) -> None:
    """Stop a build process group left behind by a dead run (only if its leader is the one we started)."""
    pgid = record.get("build_pgid")
    if not isinstance(pgid, int) or pgid <= 1:
        return
    if process_start_time(pgid) not in (None, record.get("build_leader_start")):
        return  # the leader's pid now belongs to another process
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def new_record(
    store: RunStore, run_id: str, *, request: Mapping[str, object], fail_marker: str, log: str, kind: str,
    pid: Optional[int], step: str,
) -> Dict[str, object]:
    return {
        "run_id": run_id, "root": store.root, "request": dict(request), "kind": kind,
        "pid": pid, "pid_start": process_start_time(pid) if pid else None, "host": socket.gethostname(),
        "state": RUNNING, "step": step, "percent": None, "eta_s": None, "started": time.time(),
        "finished": None, "steps": [], "log": log, "fail_marker": fail_marker, "result": None,
        "failure": None, "build_pgid": None, "build_leader_start": None, "locked": False,
    }


class Tracker:
    """Keeps the run record of one provisioning run up to date."""

    def __init__(self, store: RunStore, record: Dict[str, object], alive_fd: int) -> None:
        self.store = store
        self.record = record
        self.alive_fd = alive_fd
        self.typical = store.typical_seconds()
        self.step_started_at = time.time()
        self.worked: Dict[str, float] = {}
        self.plan: Sequence[str] = SOURCE_PLAN
        self._last_write = 0.0

    @classmethod
    def begin(
        cls, store: RunStore, run_id: str, *, request: Mapping[str, object], fail_marker: str, log: str,
        kind: str, alive_fd: Optional[int] = None,
    ) -> "Tracker":
        store.ensure_folder()
        fd = alive_fd if alive_fd is not None else store.hold_alive(run_id)
        os.set_inheritable(fd, False)  # a build we start must not keep the run "alive" after we die
        record = new_record(store, run_id, request=request, fail_marker=fail_marker, log=log, kind=kind,
                            pid=os.getpid(), step="probe")
        announced = store.read(run_id)  # `start` wrote it before launching us
        if announced and isinstance(announced.get("started"), (int, float)):
            record["started"] = announced["started"]
        tracker = cls(store, record, fd)
        tracker._write(force=True)
        store.set_current(run_id)
        tracker._start_watchdog()
        store.prune()
        return tracker

    def _start_watchdog(self) -> None:
        cmd = [sys.executable, "-m", "ensure_flydsl", "_watchdog", self.store.root, str(self.record["run_id"])]
        _WATCHDOGS.append(
            subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True, close_fds=True)
        )

    # -- steps and progress ------------------------------------------------------------------------------
    def step_started(self, name: str) -> None:
        self.step_started_at = time.time()
        self.record["step"] = name
        self.record["percent"] = None
        steps = self.record["steps"]
        assert isinstance(steps, list)
        steps.append({"name": name, "started": self.step_started_at, "ended": None})
        self._write(force=True)

    def step_ended(self, name: str, seconds: float, worked: bool) -> None:
        steps = self.record["steps"]
        assert isinstance(steps, list)
        if steps and steps[-1]["name"] == name:
            steps[-1]["ended"] = time.time()
        if worked:
            self.worked[name] = self.worked.get(name, 0.0) + seconds
        self._write(force=True)

    def line(self, text: str) -> Optional[float]:
        percent = parse_percent(text)
        if percent is not None:
            shown = self.record.get("percent")
            self.record["percent"] = round(percent, 1)
            # Throttled, but never past a whole percent: a step that prints "[1/4]" and then works for
            # minutes must not show no percent (or a stale one) all that time.
            self._write(force=not isinstance(shown, (int, float)) or int(shown) != int(percent))
        return percent

    def held_lock(self) -> None:
        """From here on this run does the work for its request: its outcome is the request's outcome."""
        self.record["locked"] = True
        self._write(force=True)

    def build_group(self, pgid: Optional[int]) -> None:
        self.record["build_pgid"] = pgid
        self.record["build_leader_start"] = process_start_time(pgid) if pgid else None
        self._write(force=True)

    def eta(self) -> Optional[float]:
        steps = self.record["steps"]
        assert isinstance(steps, list)
        done = [str(s["name"]) for s in steps if s.get("ended")]
        percent = self.record.get("percent")
        return estimate_eta(
            str(self.record.get("step")), time.time() - self.step_started_at,
            float(percent) if isinstance(percent, (int, float)) else None, self.typical, done, self.plan,
        )

    def _write(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last_write < RECORD_INTERVAL_S:
            return
        self._last_write = now
        eta = self.eta()
        self.record["eta_s"] = None if eta is None else round(eta, 1)
        self._store()

    def _store(self) -> None:
        try:
            self.store.write(self.record)
        except OSError:
            pass  # a full disk: the record is progress for pollers, never a reason to fail (or crash) the run

    # -- the end -----------------------------------------------------------------------------------------
    def succeeded(self, result: Mapping[str, object]) -> None:
        self.store.remember(self.worked)
        self.record.update(state=SUCCEEDED, finished=time.time(), result=dict(result), percent=None, eta_s=0)
        self._store()

    def failed(self, code: int, stage: str, reason: str) -> None:
        self.record.update(state=FAILED, finished=time.time(),
                           failure={"stage": stage, "exit_code": code, "reason": reason})
        self._store()

    def close(self) -> None:
        try:
            os.close(self.alive_fd)
        except OSError:
            pass
