"""Progress of a provisioning run: named steps, percent parsed from build output, ETA, the run record.

The ETA follows the route the run takes (``Plan``: the steps it still has to go through, each its expected
length on this host, from ``history.py``): the likeliest route until a provider takes one (``expect``,
``take``), none when nothing tells a release from a build yet.  Within a step it moves with the step's
percent.

A run that goes past its first probe is tracked: it writes a run record (see records.py), holds the record's
alive lock for its whole life, and starts a watchdog in a session of its own.  If the run dies without
finishing (kill -9 of its process group, the OOM killer), the watchdog's blocking flock returns at once:
it stops the orphaned build (its own process group) and writes the failure marker with exit 9, so even a
poller that only watches files learns of the death.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.runs.heartbeat import Pulse
from ensure_flydsl.runs.history import read_history, remember
from ensure_flydsl.runs.markers import Failure
from ensure_flydsl.runs.records import (
    FAILED,
    SUCCEEDED,
    RunRecord,
    RunStore,
    new_record,
    process_start_time,
)
from ensure_flydsl.settings import Request
from ensure_flydsl.support.launcher import tool_command
from ensure_flydsl.support.processes import kill_and_reap, spawn

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


def step_left(expected: float, step_elapsed: float, percent: Optional[float]) -> float:
    """Seconds left of a step: its expected length (at least what it has taken so far) scaled by what is
    left of its percent; without a percent, its expected length less what has passed."""
    if percent is not None and percent > 0:
        return max(expected, step_elapsed) * max(0.0, 100.0 - percent) / 100.0
    return max(0.0, expected - step_elapsed)


def estimate_eta(
    step: Optional[Stage], step_elapsed: float, percent: Optional[float], expected: Mapping[Stage, float],
    done: Sequence[str], plan: Optional[Plan],
) -> Optional[float]:
    """Seconds left: the rest of the current step (``step_left``), plus the expected length of each step of
    the route still to come (all of them while the run is starting: ``start`` announced it, its worker has
    not begun); None while the route is not known."""
    if step is None or plan is None:
        return None
    stages = plan.stages
    later = stages[stages.index(step) + 1:] if step in stages else stages if step == Stage.STARTING else ()
    return (step_left(expected.get(step, 0.0), step_elapsed, percent)
            + sum(expected.get(s, 0.0) for s in later if s not in done))


class Tracker:
    """Keeps the run record of one provisioning run up to date."""

    def __init__(self, store: RunStore, record: RunRecord, *, host_dir: Optional[str] = None,
                 route: Optional[Plan] = None) -> None:
        self.store = store
        self.record = record
        self.alive_fd = -1  # the descriptor that keeps the run alive, from begin() on
        self.host_dir = host_dir  # where the host's history is (None: nowhere, no history)
        self.history = read_history(host_dir)
        self.route = route  # the route the ETA adds up (None: not known yet)
        self.taken: Optional[Plan] = None  # the route a provider took: its durations go into the history
        self.step_started_at = time.time()
        self.worked: Dict[Stage, float] = {}
        self._last_write = 0.0
        self._watchdog: Optional["subprocess.Popen[bytes]"] = None
        self._end_recorded = False  # the final record (succeeded or failed) is on the disk

    @classmethod
    def begin(
        cls, store: RunStore, run_id: str, *, request: Request, fail_marker: str, log: str,
        kind: str, alive_fd: Optional[int] = None, host_dir: Optional[str] = None, route: Optional[Plan] = None,
    ) -> "Tracker":
        """The run's record, with its first ETA, begun in the store (``RunStore.begin``: whole or not at all),
        and its watchdog started."""
        record = new_record(store, run_id, request=request, fail_marker=fail_marker, log=log, kind=kind,
                            pid=os.getpid(), step=Stage.PROBE)
        tracker = cls(store, record, host_dir=host_dir, route=route)
        tracker._stamp_eta()
        tracker.alive_fd = store.begin(record, alive_fd)
        tracker._last_write = time.time()
        tracker._start_watchdog()
        store.prune()
        return tracker

    def _start_watchdog(self) -> None:
        cmd = [*tool_command(), "_watchdog", self.store.root, self.record.run_id]
        self._watchdog = spawn(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               own_group=True)
        _WATCHDOGS.append(self._watchdog)

    # -- the route ---------------------------------------------------------------------------------------
    def expect(self, route: Optional[Plan]) -> None:
        """The likeliest route, before a provider takes one (a taken route stays)."""
        if self.taken is None and route != self.route:
            self.route = route
            self._write(force=True)

    def take(self, route: Plan) -> None:
        """The route a provider takes: the ETA's, and the history's once the run succeeds."""
        self.taken = self.route = route
        self._write(force=True)

    # -- steps and progress ------------------------------------------------------------------------------
    def step_started(self, name: Stage) -> None:
        self.step_started_at = time.time()
        self.record.step = name
        self.record.percent = None
        self.record.steps.append({"name": name, "started": self.step_started_at, "ended": None})
        self._write(force=True)

    def step_ended(self, name: Stage, seconds: float, worked: bool) -> None:
        steps = self.record.steps
        if steps and steps[-1]["name"] == name:
            steps[-1]["ended"] = time.time()
        if worked:
            self.worked[name] = self.worked.get(name, 0.0) + seconds
        self._write(force=True)

    def line(self, text: str) -> Optional[float]:
        percent = parse_percent(text)
        if percent is not None:
            shown = self.record.percent
            self.record.percent = round(percent, 1)
            # Throttled, but never past a whole percent: a step that prints "[1/4]" and then works for
            # minutes must not show no percent (or a stale one) all that time.
            self._write(force=not isinstance(shown, (int, float)) or int(shown) != int(percent))
        return percent

    def held_lock(self) -> None:
        """From here on this run does the work for its request: its outcome is the request's outcome."""
        self.record.locked = True
        self._write(force=True)

    @property
    def locked(self) -> bool:
        return self.record.locked

    def step_progress(self) -> Tuple[Optional[Stage], Optional[float], Optional[float]]:
        """The current step, its own percent and the rest of it from that percent (0 at 100 %): never the
        figures the run shows while it follows another host's build (those are that host's)."""
        record = self.record
        percent = record.percent
        if record.waiting is not None or not isinstance(percent, (int, float)) or isinstance(percent, bool):
            return record.step, None, None
        eta = None
        if percent > 0 and record.step is not None:
            own = self._expected().get(record.step, 0.0)
            eta = round(step_left(own, max(0.0, time.time() - self.step_started_at), float(percent)), 1)
        return record.step, float(percent), eta

    def build_group(self, pgid: Optional[int]) -> None:
        self.record.build_pgid = pgid
        self.record.build_leader_start = process_start_time(pgid) if pgid else None
        self._write(force=True)

    def follow(self, waiting: Optional[Dict[str, object]], percent: Optional[float], eta: Optional[float]) -> None:
        """Waiting for another host's build (the build lease): its percent and ETA are this run's; when the
        wait ends (``waiting`` None) they go with it: they were never this run's own."""
        followed = self.record.waiting is not None
        self.record.waiting = waiting
        if waiting is not None or followed:
            self.record.percent = percent
            self.record.eta_s = eta
        self._store()

    def eta(self) -> Optional[float]:
        done = [str(s["name"]) for s in list(self.record.steps) if s.get("ended")]
        return estimate_eta(self.record.step, time.time() - self.step_started_at, self.record.percent,
                            self._expected(), done, self.route)

    def _expected(self) -> Mapping[Stage, float]:
        return self.history.expected(self.route) if self.route is not None else {}

    def pulse(self) -> Optional[Pulse]:
        """What the heartbeat says now: the record's step and percent, the ETA as of now (while it follows
        another host's build, that build's, as the record has it)."""
        record = self.record
        following = record.waiting is not None
        pulse = Pulse.of_record(record)
        return replace(pulse, eta_s=pulse.eta_s if following else self.eta())

    def _write(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last_write < RECORD_INTERVAL_S:
            return
        self._last_write = now
        self._stamp_eta()
        self._store()

    def _stamp_eta(self) -> None:
        eta = self.eta()
        self.record.eta_s = None if eta is None else round(eta, 1)

    def _store(self) -> bool:
        """Write the record; False when the disk refused it."""
        try:
            self.store.write(self.record)
        except OSError:
            return False  # a full disk: the record is progress for pollers, never a reason to fail (or crash) the run
        return True

    # -- the end -----------------------------------------------------------------------------------------
    # Each gives the run's reserved room back first: on a disk that filled during the run, it takes the last
    # words (a failed run gives it back before its failure marker, which comes before the final record).
    def release(self) -> None:
        """Give the run's reserved room back (idempotent: ``failed`` after it finds it gone)."""
        self.store.release(self.record.run_id)

    def succeeded(self, result: Mapping[str, object]) -> None:
        self.release()
        self.record.state, self.record.finished, self.record.result = SUCCEEDED, time.time(), dict(result)
        self.record.percent, self.record.eta_s = None, 0
        self._end_recorded = self._store()
        if self.taken is not None:  # a run that found the work done (by another run) took no route
            remember(self.host_dir, self.taken, self.worked)

    def failed(self, code: int, stage: Stage, reason: str, hint: str = "") -> None:
        self.release()
        self.record.state, self.record.finished = FAILED, time.time()
        self.record.failure = Failure(stage, code, reason, hint)
        self._end_recorded = self._store()

    def close(self) -> None:
        """The run's end: its reserved room back, its watchdog stopped when the run recorded its own end (the
        watchdog would find nothing to do), then the alive flock let go."""
        self.release()
        if self._end_recorded and self._watchdog is not None:
            kill_and_reap(self._watchdog)
        try:
            os.close(self.alive_fd)
        except OSError:
            pass


class NullTracker:
    """The tracker of a run that is not tracked (yet, or ever: a warm call): the same calls, recording nothing."""

    locked = False

    def expect(self, route: Optional[Plan]) -> None:
        pass

    def take(self, route: Plan) -> None:
        pass

    def step_started(self, name: Stage) -> None:
        pass

    def step_ended(self, name: Stage, seconds: float, worked: bool) -> None:
        pass

    def line(self, text: str) -> Optional[float]:
        return None

    def held_lock(self) -> None:
        pass

    def step_progress(self) -> Tuple[Optional[Stage], Optional[float], Optional[float]]:
        return None, None, None

    def build_group(self, pgid: Optional[int]) -> None:
        pass

    def follow(self, waiting: Optional[Dict[str, object]], percent: Optional[float], eta: Optional[float]) -> None:
        pass

    def eta(self) -> Optional[float]:
        return None

    def pulse(self) -> Optional[Pulse]:
        return None

    def succeeded(self, result: Mapping[str, object]) -> None:
        pass

    def release(self) -> None:
        pass

    def failed(self, code: int, stage: Stage, reason: str, hint: str = "") -> None:
        pass

    def close(self) -> None:
        pass
