"""How long the steps of this host's runs took, per route (a release's ETA must not add up LLVM's), for ETAs:
``history.json`` in the user's cache folder, one for the host, so that a new root starts from what it learned."""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass, field
from typing import Callable, Dict, Mapping, Optional, Tuple, TypeVar

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import history_file, history_lock
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import LockBusy, atomic_write_json, held_lock, read_json

T = TypeVar("T")

HISTORY_VERSION = 1
HISTORY_KEEP = 7  # the median of the last runs: one slow run (a cold disk, a busy host) barely moves it
MAX_STEP_S = 7 * 24 * 3600.0  # a longer "duration" is no step's (a clock jump, a foreign file): no history
_step_seconds = fields.within(fields.number, 0.0, MAX_STEP_S)
LOCK_WAIT_S = 5.0  # a run adds its durations in milliseconds; a holder stuck for longer is not waited for

# What each step takes on a host without history (seconds): the source build's are FlyDSL's on MI300X hosts.  A
# release's and a cache entry's fetch is the pin's objects only (a build's counts the submodules too).
STAGE_SECONDS: Dict[Stage, float] = {
    Stage.PROBE: 5.0, Stage.LOCK: 0.0, Stage.FETCH: 15.0, Stage.REQUIREMENTS: 1.0, Stage.FIXES: 5.0, Stage.LLVM: 900.0,
    Stage.BUILD: 300.0, Stage.RELEASE: 20.0, Stage.CACHE: 25.0, Stage.VERIFY: 10.0, Stage.PUBLISH: 1.0}
_PLAN_SECONDS: Dict[Plan, Dict[Stage, float]] = {Plan.SOURCE: {Stage.FETCH: 60.0, Stage.VERIFY: 15.0}}
DEFAULT_SECONDS: Dict[Plan, Dict[Stage, float]] = {
    plan: {stage: _PLAN_SECONDS.get(plan, {}).get(stage, STAGE_SECONDS[stage]) for stage in plan.stages}
    for plan in Plan}


@dataclass(frozen=True)
class History:
    """``history.json``: the last durations of each step, per route."""

    routes: Mapping[Plan, Mapping[Stage, Tuple[float, ...]]] = field(default_factory=dict)

    def expected(self, plan: Plan) -> Dict[Stage, float]:
        """Seconds each step of ``plan`` takes here: the median of its last runs, else the default."""
        table = dict(DEFAULT_SECONDS[plan])
        for stage, seconds in self.routes.get(plan, {}).items():
            if seconds:
                table[stage] = float(statistics.median(seconds))
        return table

    def adding(self, plan: Plan, durations: Mapping[Stage, float]) -> "History":
        """This history with one more run of ``plan`` (the last HISTORY_KEEP durations of each step kept)."""
        routes = {p: dict(steps) for p, steps in self.routes.items()}
        steps = routes.setdefault(plan, {})
        for stage, seconds in durations.items():
            # (a step of another route, such as a release tried before the build, is not this route's)
            if stage in plan.stages and _step_seconds(seconds) is not None:
                steps[stage] = (tuple(steps.get(stage, ())) + (round(float(seconds), 3),))[-HISTORY_KEEP:]
        return History(routes)

    def to_json(self) -> Dict[str, object]:
        return {"version": HISTORY_VERSION,
                "routes": {plan.value: {str(stage): list(seconds) for stage, seconds in steps.items()}
                           for plan, steps in self.routes.items()}}

    @classmethod
    def from_json(cls, data: object) -> Optional["History"]:
        """The history, or None: a route or step not known is left out, a wrong value refuses the whole file."""
        routes = data.get("routes") if isinstance(data, dict) else None
        if not isinstance(data, dict) or fields.integer(data.get("version")) != HISTORY_VERSION or not isinstance(
                routes, dict):
            return None
        tables = [(fields.member(Plan)(name), stage_table(steps, _durations)) for name, steps in routes.items()]
        if any(table is None for _, table in tables):
            return None
        return cls({plan: {stage: seconds[-HISTORY_KEEP:] for stage, seconds in table.items()}
                    for plan, table in tables if plan is not None and table is not None})


def stage_table(value: object, check: Callable[[object], Optional[T]]) -> Optional[Dict[Stage, T]]:
    """Each stage's value, in the order a run goes through them; None when ``check`` refuses one.  A stage this
    version does not know (a newer file's) is left out."""
    if not isinstance(value, dict):
        return None
    found = [(Stage.parse(name), check(v)) for name, v in value.items()]
    if any(v is None for _, v in found):
        return None
    table = {stage: v for stage, v in found if stage is not None and v is not None}
    return {stage: table[stage] for stage in Stage if stage in table}


def _durations(values: object) -> Optional[Tuple[float, ...]]:
    found = tuple(map(_step_seconds, values)) if isinstance(values, list) else None
    return None if found is None or None in found else found  # type: ignore[return-value]


def read_history(host_dir: Optional[str]) -> History:
    found = History.from_json(read_json(history_file(host_dir))) if host_dir is not None else None
    return found or History()


def remember(host_dir: Optional[str], plan: Plan, durations: Mapping[Stage, float]) -> bool:
    """Add one run of ``plan`` to the host's history, under its lock; whether it was written (never over a newer
    version's file)."""
    if host_dir is None or not durations:
        return False
    path = history_file(host_dir)
    try:
        os.makedirs(host_dir, mode=0o755, exist_ok=True)
        with held_lock(history_lock(host_dir), timeout=LOCK_WAIT_S, say=lambda _: None, what="the history's lock"):
            raw = read_json(path)
            if raw is not None and (fields.integer(raw.get("version")) or 0) > HISTORY_VERSION:
                return False
            atomic_write_json(path, (History.from_json(raw) or History()).adding(plan, durations).to_json())
    except (OSError, LockBusy):
        return False
    return True
