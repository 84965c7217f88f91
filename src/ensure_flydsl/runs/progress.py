"""A run's progress: its record kept up to date (steps, percent, an ETA over its route's steps still ahead),
its watchdog, and its heartbeat (GEAK kills an agent silent for 180 s: a line after 30 s of quiet)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import host_cache_dir
from ensure_flydsl.runs.markers import Failure
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED, RunRecord, RunStore, process_start_time
from ensure_flydsl.runs.timings import History, read_history, remember
from ensure_flydsl.support import fields
from ensure_flydsl.support.launcher import passed_on, tool_command
from ensure_flydsl.support.processes import kill_and_reap, spawn
from ensure_flydsl.support.report import Reporter, fmt_seconds, known

_NINJA = re.compile(r"^\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")  # ninja: "[12/345] Building CXX object ..."
_MAKE = re.compile(r"^\s*\[\s*(\d{1,3})%\]")  # CMake's Makefiles: "[ 45%] Building CXX object ..."
RECORD_INTERVAL_S = 0.5
OVERDUE_SHARE = 0.25  # a step past its usual time is taken to need a quarter of its time so far again
HEARTBEAT_S = 30.0
HEARTBEAT_VARIABLE = "ENSURE_FLYDSL_HEARTBEAT_S"  # shortens the interval for the tests (not a setting)
# A watchdog outlives its run by design: held here, its Popen is never collected (a ResourceWarning) while it runs.
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
    """Seconds left of a step: its expected length (at least what it took so far) scaled by its percent left.
    Past its expected length (LLVM's final link says nothing for a minute) it is rescaled, never 0."""
    if percent is not None and percent > 0:
        left = max(expected, step_elapsed) * max(0.0, 100.0 - percent) / 100.0
    else:
        left = max(0.0, expected - step_elapsed)
    return left if step_elapsed <= expected else max(left, 1.0, OVERDUE_SHARE * step_elapsed)


def overdue(expected: Mapping[Stage, float], step: Optional[Stage], step_elapsed: float) -> Optional[float]:
    """How far the current step is past the time it usually takes here (None: not past it, or no usual time)."""
    usual = expected.get(step, 0.0) if step is not None else 0.0
    return round(step_elapsed - usual, 1) if 0 < usual < step_elapsed else None


def estimate_eta(step: Optional[Stage], step_elapsed: float, percent: Optional[float], expected: Mapping[Stage, float],
                 done: Sequence[str], plan: Optional[Plan]) -> Optional[float]:
    """Seconds left: the rest of this step and the route's steps still to come; None while the route is unknown."""
    if step is None or plan is None:
        return None
    stages = plan.stages
    later = stages[stages.index(step) + 1:] if step in stages else stages if step == Stage.STARTING else ()
    return (step_left(expected.get(step, 0.0), step_elapsed, percent)
            + sum(expected.get(s, 0.0) for s in later if s not in done))


# -- the heartbeat --------------------------------------------------------------------------------------------
def heartbeat_interval(environ: Mapping[str, str]) -> float:
    try:
        value = float(environ.get(HEARTBEAT_VARIABLE, ""))
    except ValueError:
        return HEARTBEAT_S
    return value if 0 < value < HEARTBEAT_S * 100 else HEARTBEAT_S


@dataclass(frozen=True)
class Pulse:
    """What a heartbeat says of a running run (``wait`` says the same from the run record)."""

    step: Optional[Stage]
    percent: Optional[float]
    elapsed_s: float
    eta_s: Optional[float]  # None: not known (the route is not known yet)
    run_id: str
    pid: Optional[int]
    waiting: Optional[str] = None  # the build lease's holder it waits for, in words
    overdue_s: Optional[float] = None  # how far the step is past its usual time (the ETA is rescaled)

    @classmethod
    def of_record(cls, record: RunRecord) -> "Pulse":
        return cls(step=record.step, percent=record.percent, elapsed_s=max(0.0, time.time() - record.started),
                   eta_s=record.remaining_eta(), run_id=record.run_id, pid=record.pid,
                   waiting=fields.text((record.waiting or {}).get("text")), overdue_s=record.overdue_s)

    def line(self) -> str:
        shown = f" {self.percent}%" if self.percent is not None else ""
        waiting = f"; waiting for {self.waiting}" if self.waiting else ""
        late = f", overdue {fmt_seconds(self.overdue_s)}" if self.overdue_s else ""
        return (f"{RUNNING}: step {known(self.step, 'starting')}{shown}, elapsed {fmt_seconds(self.elapsed_s)}, "
                f"ETA {fmt_seconds(self.eta_s)}{late} (run {known(self.run_id)}, pid {known(self.pid)}){waiting}")

    def event(self) -> Dict[str, object]:
        """The ``--json`` event: the same, as fields, with the line as ``text``."""
        return {"event": "heartbeat", "state": RUNNING, **asdict(self), "elapsed_s": round(self.elapsed_s, 1),
                "eta_s": None if self.eta_s is None else round(self.eta_s, 1), "text": self.line()}

    def say(self, reporter: Reporter) -> None:
        reporter.say(self.line(), self.event())


@contextlib.contextmanager
def heartbeat(reporter: Reporter, pulse: Callable[[], Pulse], interval: float) -> Iterator[None]:
    """A daemon thread that says ``pulse()`` whenever ``reporter`` has been quiet for ``interval`` seconds."""
    stop = threading.Event()

    def beat() -> None:
        while True:
            due = reporter.last_shown + interval - time.monotonic()
            if stop.wait(max(0.01, min(due, interval))):
                return
            if time.monotonic() - reporter.last_shown >= interval:
                try:
                    pulse().say(reporter)
                except Exception:  # a heartbeat that cannot be said this time must not end the heartbeats
                    reporter.last_shown = time.monotonic()  # tried: an interval before the next try

    thread = threading.Thread(target=beat, name="ensure-flydsl-heartbeat", daemon=True)
    if reporter.verbosity >= 0:
        thread.start()
    try:
        yield
    finally:
        if thread.is_alive():
            stop.set()
            thread.join(timeout=5.0)


# -- the run record -------------------------------------------------------------------------------------------
def launch_watchdog(root: str, run_id: str, environ: Mapping[str, str]) -> "subprocess.Popen[bytes]":
    """The run's watchdog (liveness.watch), in a session of its own."""
    watchdog = spawn([*tool_command(), "_watchdog", root, run_id], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, own_group=True, env=passed_on(environ))
    _WATCHDOGS.append(watchdog)
    return watchdog


class Tracker:
    """Keeps a run's record up to date once ``begin`` made it visible; until then it writes nothing."""

    def __init__(self, store: RunStore, record: RunRecord) -> None:
        self.store = store
        self.record = record
        self.alive_fd = -1  # the descriptor that keeps the run alive, from begin() on
        self.host_dir: Optional[str] = None  # where the host's history is (None: no history)
        self.history = History()
        self.route: Optional[Plan] = None  # the route the ETA adds up (None: not known yet)
        self.taken: Optional[Plan] = None  # the route a provider took: its durations go into the history
        self.step_started_at = time.time()
        self.worked: Dict[Stage, float] = {}
        self._last_write = 0.0
        self._watchdog: Optional["subprocess.Popen[bytes]"] = None
        self._end_recorded = False  # the final record (succeeded or failed) is on the disk

    @property
    def begun(self) -> bool:
        return self.alive_fd >= 0

    def begin(self, alive_fd: Optional[int], environ: Mapping[str, str], route: Optional[Plan]) -> None:
        """Make the run visible (its record and first ETA, whole or not at all) and watched; ``alive_fd``: start's."""
        self.record = replace(self.record, step=Stage.PROBE, steps=[], percent=None, started=time.time())
        self.worked, self.taken, self.step_started_at = {}, None, time.time()  # what came before is not tracked
        self.host_dir, self.route = host_cache_dir(environ), route
        self.history = read_history(self.host_dir)
        self._write(force=True)  # its first ETA, stamped (nothing is written before it begins)
        self.alive_fd = self.store.begin(self.record, alive_fd)
        if alive_fd is None:  # a detached worker's was launched with it, by `start`
            self._watchdog = launch_watchdog(self.store.root, self.record.run_id, environ)
        self.store.prune()

    def expect(self, route: Optional[Plan]) -> None:
        """The likeliest route, before a provider takes one (a taken route stays)."""
        if self.taken is None and route != self.route:
            self.route = route
            self._write(force=True)

    def take(self, route: Plan) -> None:
        """The route a provider takes: the ETA's, and the history's once the run succeeds."""
        self.taken = self.route = route
        self._write(force=True)

    def step_started(self, name: Stage) -> None:
        self.step_started_at = time.time()
        self.record.step, self.record.percent = name, None
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
            shown, self.record.percent = self.record.percent, round(percent, 1)
            # Throttled, but never past a whole percent: a step that prints "[1/4]" and then works for
            # minutes must not show a stale percent all that time.
            self._write(force=shown is None or int(shown) != int(percent))
        return percent

    def held_lock(self) -> None:
        """From here on this run does the work for its request: its outcome is the request's outcome."""
        self.record.locked = True
        self._write(force=True)

    def step_progress(self) -> Tuple[Optional[Stage], Optional[float], Optional[float]]:
        """The current step, its own percent and ETA (never those of another host's build it follows)."""
        record = self.record
        percent = record.percent
        if record.waiting is not None or percent is None:
            return record.step, None, None
        eta = None
        if percent > 0 and record.step is not None:
            own = self._expected().get(record.step, 0.0)
            eta = round(step_left(own, max(0.0, time.time() - self.step_started_at), percent), 1)
        return record.step, percent, eta

    def build_group(self, pgid: Optional[int]) -> None:
        self.record.build_pgid = pgid
        self.record.build_leader_start = process_start_time(pgid) if pgid else None
        self._write(force=True)

    def follow(self, waiting: Optional[Dict[str, object]], percent: Optional[float], eta: Optional[float]) -> None:
        """Follow another host's build lease: its percent and ETA are this run's until ``waiting`` is None."""
        followed = self.record.waiting is not None
        self.record.waiting = waiting
        if waiting is not None or followed:
            self.record.percent = percent
            self.record.eta_s = fields.eta(eta)
        self._store()

    def eta(self) -> Optional[float]:
        done = [str(s["name"]) for s in list(self.record.steps) if s.get("ended")]
        return fields.eta(estimate_eta(self.record.step, time.time() - self.step_started_at, self.record.percent,
                                       self._expected(), done, self.route))

    def _expected(self) -> Mapping[Stage, float]:
        return self.history.expected(self.route) if self.route is not None else {}

    def pulse(self) -> Pulse:
        """What the heartbeat says now (while it follows another host's build, that build's ETA)."""
        pulse = Pulse.of_record(self.record)
        return pulse if self.record.waiting is not None else replace(pulse, eta_s=self.eta(), overdue_s=overdue(
            self._expected(), self.record.step, time.time() - self.step_started_at))

    def _write(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last_write < RECORD_INTERVAL_S:
            return
        self._last_write = now
        eta = self.eta()
        self.record.eta_s = None if eta is None else round(eta, 1)
        self.record.overdue_s = overdue(self._expected(), self.record.step, time.time() - self.step_started_at)
        self._store()

    def _store(self) -> bool:
        """Write the record once begun; False when not (progress is never a reason to fail the run)."""
        if not self.begun:
            return False
        try:
            self.store.write(self.record)
        except OSError:
            return False
        return True

    # Each end gives the run's reserved room back first: on a disk that filled, it takes the last words.
    def release(self) -> None:
        if self.begun:
            self.store.release(self.record.run_id)

    def succeeded(self, result: Mapping[str, object]) -> None:
        self.release()
        self.record.state, self.record.finished, self.record.result = SUCCEEDED, time.time(), dict(result)
        self.record.percent, self.record.eta_s = None, 0
        self._end_recorded = self._store()
        if self.taken is not None:  # a run that found the work done (by another run) took no route
            remember(self.host_dir, self.taken, self.worked)

    def failed(self, failure: Failure) -> None:
        self.release()
        self.record.state, self.record.finished, self.record.failure = FAILED, time.time(), failure
        self._end_recorded = self._store()

    def close(self) -> None:
        """The run's end: its watchdog stopped when the run recorded its own end, then the alive flock let go."""
        self.release()
        if self._end_recorded and self._watchdog is not None:
            kill_and_reap(self._watchdog)
        with contextlib.suppress(OSError):
            os.close(self.alive_fd)
