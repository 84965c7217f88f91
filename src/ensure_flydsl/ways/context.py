"""One ensure run as every way sees it (``Run``: settings, messages, steps, progress) and what it decided."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import host_cache_dir
from ensure_flydsl.probe.gate import Verdict
from ensure_flydsl.probe.results import Interpreter, Probe
from ensure_flydsl.result import How
from ensure_flydsl.runs.progress import Tracker, estimate_eta
from ensure_flydsl.runs.records import RunStore, new_record, new_run_id
from ensure_flydsl.runs.timings import RunFacts, read_history
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.requirements import tag_version
from ensure_flydsl.source.root import Stamps
from ensure_flydsl.support import fields, processes
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.ways import Way, demands, tries


@dataclass
class Decision:
    ok: bool
    reason: str
    how: How = How.REUSED
    tree: Optional[str] = None
    prepend: List[str] = field(default_factory=list)
    probe: Optional[Probe] = None
    verdict: Optional[Verdict] = None
    commit: Optional[str] = None
    pin: Optional[str] = None  # the pin and repository the root's tree was made from (None: found elsewhere)
    repo: Optional[str] = None
    link_mode: Optional[str] = None  # how the tree came from the host store into the root
    signed_by: Tuple[str, ...] = ()  # a tree from the fleet cache: the trusted keys (NAME:BASE64) that signed it
    unprobed: bool = False  # no probe was run: the root's stamp ruled its tree out


def likely_route(settings: Settings, release_commit: Optional[bool] = None) -> Optional[Plan]:
    """The route a run most likely takes, for the ETA; None while nothing tells a release from a build (a release
    must never announce a build's twenty minutes)."""
    strategy = settings.strategy
    if demands(strategy, Way.RELEASE) or (tries(strategy, Way.RELEASE) and (release_commit or (
            release_commit is None and tag_version(settings.pin) is not None))):
        return Plan.RELEASE
    if settings.cache is not None:
        return Plan.CACHE
    if (tries(strategy, Way.SOURCE) and not tries(strategy, Way.RELEASE)) or release_commit is False:
        return Plan.SOURCE
    return None


def announced_eta(settings: Settings, environ: Mapping[str, str]) -> Optional[float]:
    """The ETA ``start`` announces: the whole likeliest route, from the host's history (None: route unknown)."""
    route = likely_route(settings)
    if route is None:
        return None
    expected = read_history(host_cache_dir(environ)).expected(route)
    eta = fields.eta(estimate_eta(Stage.STARTING, 0.0, None, expected, [], route))
    return None if eta is None else round(eta, 1)


class Run:
    def __init__(self, settings: Settings, reporter: Reporter, environ: Mapping[str, str], run_id: str = "", *,
                 kind: str = "blocking", alive_fd: Optional[int] = None, warm_key: Optional[List[str]] = None) -> None:
        self.settings = settings
        self.started = time.monotonic()
        self.reporter = reporter
        self.environ = dict(environ)
        self.run_id = run_id or new_run_id()
        self.kind = kind
        self.warm_key = warm_key  # the front door's key: None unless the settings came from argv and variables
        self.alive_fd = alive_fd
        self.durations: Dict[Stage, float] = {}
        self.step_name = Stage.SETTINGS
        self.interpreter: Interpreter  # the target interpreter, described by the preflight before any stage uses it
        self.stamps = Stamps(settings.root)
        store = RunStore(settings.root)
        self.tracker = Tracker(store, new_record(
            store, self.run_id, request=settings.request(), fail_marker=settings.fail_marker,
            log=settings.log_file, kind=kind, pid=os.getpid(), step=self.step_name,
            path_env=self.environ.get("PATH")))
        self.facts = RunFacts()  # bytes fetched, cache hits, lease waits: for the run's timing record
        self._worked = False
        processes.set_heartbeat(self.say)  # a network step that waits says so every 30 s

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        self.reporter.say(message)

    def track(self) -> None:
        """From here on the run is visible to ``status`` and ``wait``, and its death is noticed."""
        if not self.tracker.begun:
            self.tracker.begin(self.alive_fd, self.environ, likely_route(self.settings))
            if self.step_name in Plan.SOURCE.stages:
                self.tracker.step_started(self.step_name)

    def plan(self, plan: Plan) -> None:
        """The route a way takes: the ETA adds up its steps, and the host's history learns them."""
        self.tracker.take(plan)

    def worked(self) -> None:
        """The current step did real work: its duration counts for future ETAs."""
        self._worked = True

    def build_line(self, line: str) -> None:
        self.reporter.build_line(line)
        percent = self.tracker.line(line)
        if percent is not None:
            self.reporter.progress(self.step_name, percent, self.tracker.eta())

    @contextlib.contextmanager
    def step(self, name: Stage) -> Iterator[None]:
        self.step_name = name
        self._worked = False
        started = time.monotonic()
        self.reporter.step(name, "started")
        self.tracker.step_started(name)
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            self.durations[name] = self.durations.get(name, 0.0) + seconds
            self.reporter.step(name, "finished", seconds)
            self.tracker.step_ended(name, seconds, self._worked or not name.work)
