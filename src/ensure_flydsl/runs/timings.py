"""Where each run's time went (``stats``): ``<host cache>/runs/<run id>.json``, one file per run written once
(runs that end together share nothing; a fleet copies folders together), and what they add up to."""

from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ensure_flydsl.errors import FAILURE_CODES, Plan, Stage
from ensure_flydsl.layout import RUN_RECORD_SUFFIX, timing_file
from ensure_flydsl.result import LINK_MODES as COPY_MODES
from ensure_flydsl.runs.history import stage_table
from ensure_flydsl.runs.records import KINDS, RunRecord, is_new_run_id, is_run_id
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import checked
from ensure_flydsl.support.files import atomic_write_json, read_regular
from ensure_flydsl.support.report import fmt_seconds
from ensure_flydsl.support.space import size_text

TIMING_VERSION = 1
KEEP_RUNS = 500  # a few hundred KB: a month of a busy host's runs
KEEP_DAYS = 30.0
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

    route: Optional[Plan] = None  # the way a provider took (Run.plan)
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


def _exit_code(value: object) -> Optional[int]:
    found = fields.integer(value)
    return found if found == 0 or found in FAILURE_CODES else None


def _ms(value: object) -> Optional[float]:
    """Seconds as a record holds them: rounded to milliseconds, so a record read and written again is the same."""
    seconds = fields.seconds(value)
    return None if seconds is None else round(seconds, 3)


def _table(value: object, names: Tuple[str, ...], check: Callable[[object], object]) -> Optional[Dict[str, object]]:
    """An object whose keys are some of ``names`` and whose values pass ``check``, else None."""
    if not isinstance(value, dict) or not set(value) <= set(names):
        return None
    found = {name: check(v) for name, v in value.items()}
    return None if any(v is None for v in found.values()) else found


@dataclass(frozen=True)
class TimingRecord:
    """``<run id>.json`` in the host's ``runs/``: where one run's time went (docs/schema/timing.schema.json)."""

    run_id: str = checked(lambda v: v if is_run_id(v) else None)
    host: str = checked(fields.short_text)
    root: str = checked(fields.absolute_path)
    kind: str = checked(lambda v: fields.one_of(v, KINDS))
    started: float = checked(_ms)  # wall clock, seconds since the epoch
    ended: float = checked(_ms)
    exit_code: int = checked(_exit_code)  # 0, or the code a failed run records
    way: str = checked(lambda v: fields.one_of(v, WAYS))  # FAILED exactly when exit_code is not 0
    stages: Mapping[Stage, float] = checked(lambda v: stage_table(v, _ms))  # a stage gone through twice: both added up
    stage: Optional[Stage] = checked(fields.text, None, convert=Stage.parse)  # where a failed run stopped
    route: Optional[Plan] = checked(fields.member(Plan), None)  # the way a provider took (None: none did)
    pin: Optional[str] = checked(fields.short_text, None)
    tool: Optional[str] = checked(fields.short_text, None)  # ensure-flydsl's version that wrote it
    fetched: Mapping[str, int] = checked(lambda v: _table(v, FETCHES, fields.byte_count), factory=dict)
    cache: Mapping[str, str] = checked(lambda v: _table(v, LOOKUPS, lambda c: fields.one_of(c, (HIT, MISS))),
                                       factory=dict)
    link_mode: Optional[str] = checked(lambda v: fields.one_of(v, LINK_MODES), None)
    lock_wait_s: Optional[float] = checked(_ms, None)  # None: the run did not go for the lock
    lease_wait_s: Optional[float] = checked(_ms, None)  # None: it took no turn at a build lease

    @property
    def total_s(self) -> float:
        return self.ended - self.started

    @property
    def bytes_fetched(self) -> Optional[int]:
        """Every byte the run fetched, or None when it fetched nothing whose size is known."""
        return sum(self.fetched.values()) if self.fetched else None

    def to_json(self) -> Dict[str, object]:
        return {
            "version": TIMING_VERSION, "run_id": self.run_id, "host": self.host, "root": self.root,
            "kind": self.kind, "started": round(self.started, 3), "ended": round(self.ended, 3),
            "total_s": round(round(self.ended, 3) - round(self.started, 3), 3),  # as a reader derives it
            "exit_code": self.exit_code, "way": self.way,
            "stage": None if self.stage is None else str(self.stage),
            "route": None if self.route is None else self.route.value, "pin": self.pin, "tool": self.tool,
            "stages": {str(s): round(v, 3) for s, v in self.stages.items()},
            "fetched": dict(self.fetched), "bytes_fetched": self.bytes_fetched, "cache": dict(self.cache),
            "link_mode": self.link_mode, "lock_wait_s": _ms(self.lock_wait_s),
            "lease_wait_s": _ms(self.lease_wait_s),
        }

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
def keep(folder: Optional[str], record: TimingRecord) -> bool:
    """Write ``record`` into ``folder`` (created), then keep the folder bounded; whether it was written."""
    if folder is None:
        return False
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        atomic_write_json(timing_file(folder, record.run_id), record.to_json())
    except OSError:
        return False
    prune(folder)
    return True


def prune(folder: str, *, keep_runs: int = KEEP_RUNS, keep_days: float = KEEP_DAYS) -> None:
    """Remove the records beyond the newest ``keep_runs`` or older than ``keep_days``: only regular files named
    as the tool names records."""
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
    dated.sort(key=lambda d: _newest_real(d[0], now), reverse=True)
    oldest = now - keep_days * 86400.0
    for index, (mtime, path) in enumerate(dated):
        if index >= keep_runs or mtime < oldest:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _newest_real(when: float, now: float) -> Tuple[bool, float]:
    """The order of records in time: one dated in the future (a clock that was ahead, a planted file) counts as
    now, and older than any real one, so that it never pushes a real run's record out of the folder or of view."""
    return when <= now, min(when, now)


@dataclass(frozen=True)
class Skipped:
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
                     key=lambda r: (*_newest_real(r.started, now), r.run_id))
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
@dataclass(frozen=True)
class Figures:
    """How many values, their median (None without any) and their sum: seconds, or bytes."""

    count: int
    median: Optional[float]
    total: float

    @classmethod
    def of(cls, values: Sequence[float]) -> "Figures":
        return cls(len(values), float(statistics.median(values)) if values else None, float(sum(values)))

    def to_json(self, unit: str = "_s") -> Dict[str, object]:
        digits = 3 if unit == "_s" else None
        return {"runs": self.count, "median" + unit: None if self.median is None else round(self.median, digits),
                "sum" + unit: round(self.total, digits)}


@dataclass(frozen=True)
class Share:
    """One stage's (or ``other``'s) part of all the runs' wall time."""

    stage: str
    seconds: float
    share: float

    def to_json(self) -> Dict[str, object]:
        return {"stage": self.stage, "sum_s": round(self.seconds, 3), "share": round(self.share, 4)}


@dataclass(frozen=True)
class Summary:
    runs: int
    failed: int
    ways: Dict[str, int]  # WAYS, in that order
    hosts: Dict[str, int]
    total: Figures
    stages: Dict[Stage, Figures]  # in the order a run goes through them
    where: List[Share]  # largest first
    lock_wait: Figures
    lease_wait: Figures
    fetched: Figures  # bytes, over the runs that fetched something of a known size
    fetched_by: Dict[str, int]  # FETCHES: bytes
    cache: Dict[str, Dict[str, int]]  # LOOKUPS: {hit, miss}: count
    link_modes: Dict[str, int]

    def to_json(self) -> Dict[str, object]:
        fetched = self.fetched.to_json("")
        fetched["by"] = dict(self.fetched_by)
        return {"runs": self.runs, "failed": self.failed, "ways": dict(self.ways), "hosts": dict(self.hosts),
                "total": self.total.to_json(), "stages": {str(s): f.to_json() for s, f in self.stages.items()},
                "where": [w.to_json() for w in self.where], "lock_wait": self.lock_wait.to_json(),
                "lease_wait": self.lease_wait.to_json(), "bytes_fetched": fetched,
                "cache": {what: dict(counts) for what, counts in self.cache.items()},
                "link_modes": dict(self.link_modes)}

    def lines(self) -> List[str]:
        """What ``stats`` says of the runs as a whole."""
        if not self.runs:
            return ["no runs recorded yet (every ensure run that is not answered warm writes one)"]
        lines = [f"{runs_text(self.runs)}: " + ", ".join(f"{way} {n}" for way, n in self.ways.items()),
                 f"median total {seconds_text(self.total.median)}"]
        if self.stages:
            lines.append("median per stage: " + ", ".join(f"{stage} {seconds_text(f.median)}"
                                                          for stage, f in self.stages.items()))
        if self.where:
            lines.append("where the time went: " + ", ".join(f"{w.stage} {100 * w.share:.0f}%" for w in self.where))
        for figures, what in ((self.lock_wait, "lock waits"), (self.lease_wait, "build lease waits")):
            if figures.count:
                lines.append(f"{what}: median {seconds_text(figures.median)}, {seconds_text(figures.total)} in all "
                             f"({runs_text(figures.count)})")
        if self.fetched.count:
            by = ", ".join(f"{what} {size_text(size)}" for what, size in self.fetched_by.items())
            lines.append(f"fetched: {size_text(self.fetched.total)} in {runs_text(self.fetched.count)} ({by})")
        for what, counts in self.cache.items():
            lines.append(f"binary cache, {what}: {counts.get(HIT, 0)} hit(s), {counts.get(MISS, 0)} miss(es)")
        if self.link_modes:
            lines.append("host store links: " + ", ".join(f"{m} {n}" for m, n in self.link_modes.items()))
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


def where_the_time_went(records: Sequence[TimingRecord]) -> List[Share]:
    """Each stage's share of all the runs' wall time, largest first, then ``other``'s; none without time."""
    total = sum(r.total_s for r in records)
    if total <= 0:
        return []
    spent = {str(stage): sum(r.stages.get(stage, 0.0) for r in records) for stage in Stage
             if any(stage in r.stages for r in records)}
    other = max(0.0, total - sum(spent.values()))
    ranked = sorted(spent.items(), key=lambda item: (-item[1], item[0]))
    return [Share(name, seconds, seconds / total) for name, seconds in ranked] + [Share(OTHER, other, other / total)]


def summarize(records: Sequence[TimingRecord]) -> Summary:
    fetched = [r for r in records if r.bytes_fetched is not None]
    return Summary(
        runs=len(records),
        failed=sum(1 for r in records if r.exit_code != 0),
        ways=_counts((r.way for r in records), WAYS),
        hosts=_counts((r.host for r in records), sorted({r.host for r in records})),
        total=Figures.of([r.total_s for r in records]),
        stages={stage: Figures.of([r.stages[stage] for r in records if stage in r.stages]) for stage in Stage
                if any(stage in r.stages for r in records)},
        where=where_the_time_went(records),
        lock_wait=Figures.of([r.lock_wait_s for r in records if r.lock_wait_s is not None]),
        lease_wait=Figures.of([r.lease_wait_s for r in records if r.lease_wait_s is not None]),
        fetched=Figures.of([float(r.bytes_fetched or 0) for r in fetched]),
        fetched_by={what: sum(r.fetched.get(what, 0) for r in fetched) for what in FETCHES
                    if any(what in r.fetched for r in fetched)},
        cache={what: _counts((r.cache.get(what) for r in records), (HIT, MISS)) for what in LOOKUPS
               if any(what in r.cache for r in records)},
        link_modes=_counts((r.link_mode for r in records), LINK_MODES),
    )
