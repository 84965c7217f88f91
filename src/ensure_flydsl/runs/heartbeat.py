"""The heartbeat: while a run works, a line (state, step, percent, elapsed, ETA) whenever it has shown
nothing for an interval (30 s), whatever the step and however its output is read.

GEAK kills an agent that is silent for 180 s, and runs ``ensure-flydsl`` under nohup with its output in a
file, or captured: a blocking run printed nothing for 200 s while a probe, a lock wait, a download or a
build step printed nothing itself.  One thread per run (:class:`Heartbeat`, around the whole pipeline)
covers every step, rather than each step saying it is alive: it watches when the reporter last wrote to
its stream and says the run's :class:`Pulse` (from its Tracker) once that is an interval ago.  ``wait``
says the same line from the run record.  ``-q`` shows nothing but a failure, heartbeats included (the
README says so): a caller with a silence detector runs without ``-q``, or polls with ``wait``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Callable, Dict, Mapping, Optional, Type

from ensure_flydsl.errors import Stage
from ensure_flydsl.runs.records import RUNNING, RunRecord
from ensure_flydsl.support.report import Reporter, fmt_seconds, known

HEARTBEAT_S = 30.0
# Shortens the interval for the tests (internal; not a setting), as ENSURE_FLYDSL_NETWORK_SILENCE_S does.
HEARTBEAT_VARIABLE = "ENSURE_FLYDSL_HEARTBEAT_S"


def heartbeat_interval(environ: Mapping[str, str]) -> float:
    """Seconds of silence after which a run says its heartbeat (HEARTBEAT_S unless the test variable sets a
    positive number)."""
    try:
        value = float(environ.get(HEARTBEAT_VARIABLE, ""))
    except ValueError:
        return HEARTBEAT_S
    return value if 0 < value < HEARTBEAT_S * 100 else HEARTBEAT_S


@dataclass(frozen=True)
class Pulse:
    """What a heartbeat says of a running run."""

    step: Optional[Stage]
    percent: Optional[float]
    elapsed_s: float
    eta_s: Optional[float]  # None: not known (the route is not known yet)
    run_id: str
    pid: Optional[int]
    waiting: Optional[str] = None  # the build lease's holder it waits for, in words

    @classmethod
    def of_record(cls, record: RunRecord) -> "Pulse":
        waiting = record.waiting.get("text") if isinstance(record.waiting, dict) else None
        return cls(record.step, record.percent, max(0.0, time.time() - record.started), record.remaining_eta(),
                   record.run_id, record.pid, waiting if isinstance(waiting, str) else None)

    def line(self) -> str:
        shown = f" {self.percent}%" if self.percent is not None else ""
        waiting = f"; waiting for {self.waiting}" if self.waiting else ""
        return (f"{RUNNING}: step {known(self.step, 'starting')}{shown}, elapsed {fmt_seconds(self.elapsed_s)}, "
                f"ETA {fmt_seconds(self.eta_s)} (run {known(self.run_id)}, pid {known(self.pid)}){waiting}")

    def event(self) -> Dict[str, object]:
        """The ``--json`` event: the same, as fields, with the line as ``text``."""
        return {"event": "heartbeat", "state": RUNNING, "step": self.step, "percent": self.percent,
                "elapsed_s": round(self.elapsed_s, 1), "eta_s": None if self.eta_s is None else round(self.eta_s, 1),
                "run_id": self.run_id, "pid": self.pid, "waiting": self.waiting, "text": self.line()}


def say_pulse(reporter: Reporter, pulse: Pulse) -> None:
    reporter.pulse(pulse.line(), pulse.event())


class Heartbeat:
    """A daemon thread that says ``pulse()`` whenever ``reporter`` has shown nothing for ``interval``
    seconds, from ``with Heartbeat(...)`` to the end of the block.  Nothing under ``-q``."""

    def __init__(self, reporter: Reporter, pulse: Callable[[], Pulse], interval: float) -> None:
        self.reporter = reporter
        self.pulse = pulse
        self.interval = interval
        self._stop: Optional["threading.Event"] = None
        self._thread: Optional["threading.Thread"] = None

    def __enter__(self) -> "Heartbeat":
        if self.reporter.verbosity < 0:
            return self

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="ensure-flydsl-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        if self._stop is not None and self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5.0)

    def _beat(self) -> None:
        assert self._stop is not None
        while True:
            due = self.reporter.last_shown + self.interval - time.monotonic()
            if self._stop.wait(max(0.01, min(due, self.interval))):
                return
            if time.monotonic() - self.reporter.last_shown >= self.interval:
                try:
                    say_pulse(self.reporter, self.pulse())
                except Exception:  # a heartbeat that cannot be said this time must not end the heartbeats
                    self.reporter.mark_shown()  # tried: an interval before the next try
