"""Where this host's runs' time went: ``<host cache>/runs/<run id>.json``, one file per run written once (runs
that end together share nothing; a fleet copies folders together), and what they add up to (``stats``); and
``history.json``, the last durations of each step per route, for ETAs (a new root starts from what it learned)."""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

from ensure_flydsl.errors import FAILURE_CODES, Plan, Stage
from ensure_flydsl.layout import RUN_RECORD_SUFFIX, history_file, history_lock, host_cache_dir, timing_file, timings_dir
from ensure_flydsl.result import LINK_MODES as COPY_MODES
from ensure_flydsl.runs.records import KINDS, RunRecord, is_new_run_id, is_run_id
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import checked
from ensure_flydsl.support.files import LockBusy, atomic_write_json, held_lock, read_json, read_regular
from ensure_flydsl.support.report import fmt_seconds
from ensure_flydsl.support.space import size_text

T = TypeVar("T")

TIMING_VERSION = 1
KEEP_RUNS = 500  # a few hundred KB: a month of a busy host's runs
MAX_RECORD_BYTES = 256 << 10  # a record is a few KB; a larger file is not one
ROUNDING_S = 0.001  # a record's seconds are rounded to milliseconds: its stages may add up to a little more
# The way a run took: what its call did (result.py: Action), the tree's origin when it made one (How), or failed.
FAILED = "failed"
WAYS = ("warm", "verified", "reused", "built", "released", "cached", FAILED)
FETCHES = ("git", "wheel", "cache", "prebuilt")  # the pin's objects, the release wheel, the binary cache's blobs, a
# prebuilt MLIR (FLYDSL_MLIR_URL)
LOOKUPS = ("tree", "mlir")  # what a run looks up in the binary cache
LINK_MODES = (*COPY_MODES, "hardlink")  # hardlink: the store of an earlier version linked the tree
HIT, MISS = "hit", "miss"
OTHER = "other"  # the time of a run that no stage counts (the settings, the preflight, the answer printed)


@dataclass
class RunFacts:
    """What a run learns as it goes, for its timing record: the providers add to it."""

    fetched: Dict[str, int] = field(default_factory=dict)  # FETCHES: bytes
    cache: Dict[str, str] = field(default_factory=dict)  # LOOKUPS: HIT or MISS (the last one)
    lease_wait_s: Optional[float] = None  # None: the run took no turn at a build lease
    mlir: Optional[str] = None  # where a source build's MLIR came from: built, cached, prebuilt URL, given PATH

    def add_fetched(self, what: str, size: Optional[int]) -> None:
        if size is not None and size >= 0:
            self.fetched[what] = self.fetched.get(what, 0) + size

    def looked_up(self, what: str, hit: bool) -> None:
        self.cache[what] = HIT if hit else MISS

    def waited_for_lease(self, seconds: float) -> None:
        self.lease_wait_s = (self.lease_wait_s or 0.0) + max(0.0, seconds)


def _table(value: object, names: Tuple[str, ...], check: Callable[[object], object]) -> Optional[Dict[str, object]]:
    """An object whose keys are some of ``names`` and whose values pass ``check``, else None."""
    if not isinstance(value, dict) or not set(value) <= set(names):
        return None
    found = {name: check(v) for name, v in value.items()}
    return None if any(v is None for v in found.values()) else found


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


@dataclass(frozen=True)
class TimingRecord:
    """``<run id>.json`` in the host's ``runs/``: where one run's time went (docs/schema/timing.schema.json)."""

    run_id: str = checked(lambda v: v if is_run_id(v) else None)
    host: str = checked(fields.short_text)
    root: str = checked(fields.absolute_path)
    kind: str = checked(lambda v: fields.one_of(v, KINDS))
    started: float = checked(fields.seconds)  # wall clock, seconds since the epoch
    ended: float = checked(fields.seconds)
    exit_code: int = checked(lambda v: v if fields.integer(v) in (0, *FAILURE_CODES) else None)  # 0, or a failure's
    way: str = checked(lambda v: fields.one_of(v, WAYS))  # FAILED exactly when exit_code is not 0
    # A stage gone through twice: both added up.
    stages: Mapping[Stage, float] = checked(lambda v: stage_table(v, fields.seconds))
    stage: Optional[Stage] = checked(fields.text, None, convert=Stage.parse)  # where a failed run stopped
    route: Optional[Plan] = checked(fields.member(Plan), None)  # the way a provider took (None: none did)
    pin: Optional[str] = checked(fields.short_text, None)
    tool: Optional[str] = checked(fields.short_text, None)  # ensure-flydsl's version that wrote it
    fetched: Mapping[str, int] = checked(lambda v: _table(v, FETCHES, fields.byte_count), factory=dict)
    cache: Mapping[str, str] = checked(lambda v: _table(v, LOOKUPS, lambda c: fields.one_of(c, (HIT, MISS))),
                                       factory=dict)
    link_mode: Optional[str] = checked(lambda v: fields.one_of(v, LINK_MODES), None)
    lock_wait_s: Optional[float] = checked(fields.seconds, None)  # None: the run did not go for the lock
    lease_wait_s: Optional[float] = checked(fields.seconds, None)  # None: it took no turn at a build lease

    def __post_init__(self) -> None:
        # Milliseconds, as a record holds them: one read and written again is the same.
        for name in ("started", "ended", "lock_wait_s", "lease_wait_s"):
            value = getattr(self, name)
            object.__setattr__(self, name, None if value is None else round(value, 3))
        object.__setattr__(self, "stages", {s: round(v, 3) for s, v in self.stages.items()})

    @property
    def total_s(self) -> float:
        return self.ended - self.started

    @property
    def bytes_fetched(self) -> Optional[int]:
        """Every byte the run fetched, or None when it fetched nothing whose size is known."""
        return sum(self.fetched.values()) if self.fetched else None

    def to_json(self) -> Dict[str, object]:
        return {"version": TIMING_VERSION, **asdict(self), "stages": {str(s): v for s, v in self.stages.items()},
                "route": None if self.route is None else self.route.value, "total_s": round(self.total_s, 3),
                "bytes_fetched": self.bytes_fetched}

    @classmethod
    def from_json(cls, data: object) -> Optional["TimingRecord"]:
        """The record, or None for a file that is not this version's: each field checked, the times in order,
        the stages fitting in them, a way that agrees with the exit code."""
        if (not isinstance(data, dict) or fields.integer(data.get("version")) != TIMING_VERSION
                or "fetched" not in data or "cache" not in data):
            return None
        found = fields.from_json(cls, data)
        if (found is None or found.ended < found.started or (found.way == FAILED) != (found.exit_code != 0)
                or sum(found.stages.values()) > found.total_s + ROUNDING_S * (len(found.stages) + 2)):
            return None
        return found


def of_dead_run(dead: RunRecord, host: str) -> Optional[TimingRecord]:
    """The timing record of a run that died, from its run record; None for a record that cannot say it."""
    failure, ended = dead.failure, dead.finished
    if failure is None or ended is None or ended < dead.started or not dead.root.startswith("/"):
        return None
    stages: Dict[Stage, float] = {}
    steps = list(dead.steps)
    for index, step in enumerate(steps):
        # A step without its end ended when the next began, the last one when the run last gave a sign of life.
        after = steps[index + 1].get("started") if index + 1 < len(steps) else ended
        stage, began = Stage.parse(step.get("name")), fields.seconds(step.get("started"))
        finished = fields.seconds(step["ended"] if step.get("ended") is not None else after)
        if stage is not None and began is not None and finished is not None and (
                dead.started <= began <= finished <= ended):
            stages[stage] = stages.get(stage, 0.0) + finished - began
    return TimingRecord(run_id=dead.run_id, host=host, root=dead.root, kind=dead.kind, started=dead.started,
                        ended=ended, exit_code=failure.exit_code, way=FAILED, stages=stages, stage=failure.stage,
                        pin=fields.short_text(dead.request.pin), lock_wait_s=stages.get(Stage.LOCK))


# -- the folder -------------------------------------------------------------------------------------------
def keep(environ: Mapping[str, str], record: Optional[TimingRecord]) -> bool:
    """Write ``record`` into the host's folder of timing records (created), then keep it bounded; whether it was."""
    host_dir = host_cache_dir(environ)
    if host_dir is None or record is None:
        return False
    folder = timings_dir(host_dir)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        atomic_write_json(timing_file(folder, record.run_id), record.to_json())
    except OSError:
        return False
    prune(folder)
    return True


def prune(folder: str, *, keep_runs: int = KEEP_RUNS) -> None:
    """Remove the records beyond the newest ``keep_runs`` (regular files named as records), whatever their age: an
    age limit would remove every real record at the first run after the clock jumped forward."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    dated: List[Tuple[float, str]] = []
    for entry in entries:
        named = entry.name.endswith(RUN_RECORD_SUFFIX) and is_new_run_id(entry.name[:-len(RUN_RECORD_SUFFIX)])
        with contextlib.suppress(OSError):
            if named and entry.is_file(follow_symlinks=False):
                dated.append((entry.stat(follow_symlinks=False).st_mtime, entry.path))
    now = time.time()
    dated.sort(key=lambda d: newest_real(d[0], now), reverse=True)
    for _, path in dated[keep_runs:]:
        with contextlib.suppress(OSError):
            os.unlink(path)


def newest_real(when: float, now: float) -> Tuple[bool, float]:
    """The order of records in time: one dated in the future (a clock that was ahead, a planted file) counts as
    now, and older than any real one, so that it never pushes a real run's record out of the folder or of view."""
    return when <= now, min(when, now)


class Skipped(NamedTuple):
    """A file in the records' folder that is not a timing record this version reads, and why."""

    path: str
    why: str


def read_records(folder: str) -> Tuple[List[TimingRecord], List[Skipped]]:
    """The timing records in ``folder``, oldest first, and the files that are not one (never a traceback);
    hidden files (an atomic write's temporary file) are neither."""
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return [], []
    except OSError as exc:  # another user's folder, a file planted at its name
        return [], [Skipped(folder, f"the folder cannot be listed ({exc.strerror or exc})")]
    found = [_read(os.path.join(folder, name)) for name in names if not name.startswith(".")]
    now = time.time()
    records = sorted((r for r in found if isinstance(r, TimingRecord)),
                     key=lambda r: (*newest_real(r.started, now), r.run_id))
    return records, [s for s in found if isinstance(s, Skipped)]


def _read(path: str) -> Union[TimingRecord, Skipped]:
    raw = read_regular(path, MAX_RECORD_BYTES)
    if raw is None:
        return Skipped(path, "not a regular file of at most 256 KiB")
    try:
        data = fields.json_object(raw)
    except ValueError as exc:
        return Skipped(path, str(exc))
    record = TimingRecord.from_json(data)
    version = fields.integer(data.get("version"))
    if record is None and version is not None and version > TIMING_VERSION:
        return Skipped(path, f"a newer version's record (version {version})")
    return record or Skipped(path, "not a timing record")


# -- what they add up to (``ensure-flydsl stats``; docs/schema/stats.schema.json) ----------------------------
def _figures(values: Sequence[float], unit: str = "_s") -> Dict[str, object]:
    """How many values, their median (None without any) and their sum: seconds to the millisecond, or bytes."""
    digits = 3 if unit == "_s" else None
    median = None if not values else round(float(statistics.median(values)), digits)
    return {"runs": len(values), "median" + unit: median, "sum" + unit: round(float(sum(values)), digits)}


def summary_lines(summary: Mapping[str, Any]) -> List[str]:
    """What ``stats`` says of the runs as a whole, from ``summarize``'s object."""
    if not summary["runs"]:
        return ["no runs recorded yet (every ensure run that is not answered warm writes one)"]
    lines = [f"{runs_text(summary['runs'])}: " + ", ".join(f"{way} {n}" for way, n in summary["ways"].items()),
             f"median total {seconds_text(summary['total']['median_s'])}"]
    if summary["stages"]:
        lines.append("median per stage: " + ", ".join(f"{stage} {seconds_text(f['median_s'])}"
                                                      for stage, f in summary["stages"].items()))
    if summary["where"]:
        lines.append("where the time went: " + ", ".join(f"{w['stage']} {100 * w['share']:.0f}%"
                                                         for w in summary["where"]))
    for key, what in (("lock_wait", "lock waits"), ("lease_wait", "build lease waits")):
        figures = summary[key]
        if figures["runs"]:
            lines.append(f"{what}: median {seconds_text(figures['median_s'])}, {seconds_text(figures['sum_s'])} in "
                         f"all ({runs_text(figures['runs'])})")
    fetched = summary["bytes_fetched"]
    if fetched["runs"]:
        by = ", ".join(f"{what} {size_text(size)}" for what, size in fetched["by"].items())
        lines.append(f"fetched: {size_text(fetched['sum'])} in {runs_text(fetched['runs'])} ({by})")
    for what, counts in summary["cache"].items():
        lines.append(f"binary cache, {what}: {counts.get(HIT, 0)} hit(s), {counts.get(MISS, 0)} miss(es)")
    if summary["link_modes"]:
        lines.append("host store links: " + ", ".join(f"{m} {n}" for m, n in summary["link_modes"].items()))
    return lines


def runs_text(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def seconds_text(seconds: Optional[float]) -> str:
    """Tenths of a second below a minute (a warm host's runs take seconds)."""
    return "unknown" if seconds is None else f"{seconds:.1f}s" if seconds < 60 else fmt_seconds(seconds)


def table(runs: Sequence[TimingRecord]) -> List[str]:
    """A line per run (its id, host, root, way, exit code, total) with its stages last."""
    rows = [("run", "host", "root", "way", "exit", "total", "stages")]
    for run in runs:
        steps = ", ".join(f"{stage} {seconds_text(seconds)}" for stage, seconds in run.stages.items())
        rows.append((run.run_id, run.host, run.root, run.way, str(run.exit_code), seconds_text(run.total_s), steps))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


def _counts(values: Iterable[Optional[str]], order: Iterable[str]) -> Dict[str, int]:
    found = collections.Counter(value for value in values if value is not None)
    return {name: found[name] for name in order if name in found}


def summarize(records: Sequence[TimingRecord]) -> Dict[str, object]:
    """What the runs add up to, as ``stats --json`` gives it: counts, medians and sums, where the time went."""
    fetched = [r for r in records if r.bytes_fetched is not None]
    stages = [stage for stage in Stage if any(stage in r.stages for r in records)]
    # Each stage's share of all the runs' wall time, largest first, then ``other``'s.
    total = sum(r.total_s for r in records)
    spent = sorted(((str(stage), sum(r.stages.get(stage, 0.0) for r in records)) for stage in stages),
                   key=lambda item: (-item[1], item[0]))
    spent.append((OTHER, max(0.0, total - sum(seconds for _, seconds in spent))))
    bytes_fetched = _figures([float(r.bytes_fetched or 0) for r in fetched], "")
    bytes_fetched["by"] = {what: sum(r.fetched.get(what, 0) for r in fetched) for what in FETCHES
                           if any(what in r.fetched for r in fetched)}
    return {
        "runs": len(records), "failed": sum(1 for r in records if r.exit_code != 0),
        "ways": _counts((r.way for r in records), WAYS),
        "hosts": _counts((r.host for r in records), sorted({r.host for r in records})),
        "total": _figures([r.total_s for r in records]),
        "stages": {str(stage): _figures([r.stages[stage] for r in records if stage in r.stages]) for stage in stages},
        "where": [{"stage": name, "sum_s": round(seconds, 3), "share": round(seconds / total, 4)}
                  for name, seconds in spent] if total > 0 else [],
        "lock_wait": _figures([r.lock_wait_s for r in records if r.lock_wait_s is not None]),
        "lease_wait": _figures([r.lease_wait_s for r in records if r.lease_wait_s is not None]),
        "bytes_fetched": bytes_fetched,
        "cache": {what: _counts((r.cache.get(what) for r in records), (HIT, MISS)) for what in LOOKUPS
                  if any(what in r.cache for r in records)},
        "link_modes": _counts((r.link_mode for r in records), LINK_MODES),
    }


# -- the ETA history (``history.json``): each step's last durations, per route (a release's ETA adds no LLVM) --
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
