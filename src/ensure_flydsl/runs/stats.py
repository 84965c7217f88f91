"""What a host's timing records add up to (``ensure-flydsl stats``): counts, medians, and where the time went.

Pure: records in, one summary out (its JSON: docs/schema/stats.schema.json, ``summary``).  The median is the
figure to read (one slow run, a cold disk or a busy host, barely moves it); sums are what the shares are
of.  "Where the time went" divides every run's wall time among its stages, and ``other`` is the time no
stage counts (reading the settings, the preflight before the probe's step, the answer printed).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence

from ensure_flydsl.errors import Stage
from ensure_flydsl.runs.timings import FETCHES, HIT, LINK_MODES, LOOKUPS, MISS, WAYS, TimingRecord

OTHER = "other"  # the time of a run that no stage counts


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


def _counts(values: Iterable[Optional[str]], order: Iterable[str]) -> Dict[str, int]:
    found: Dict[str, int] = {}
    for value in values:
        if value is not None:
            found[value] = found.get(value, 0) + 1
    return {name: found[name] for name in order if name in found}


def where_the_time_went(records: Sequence[TimingRecord]) -> List[Share]:
    """Each stage's share of all the runs' wall time, largest first, then ``other``'s; none without time."""
    total = sum(r.total_s for r in records)
    if total <= 0:
        return []
    spent: Dict[str, float] = {}
    for record in records:
        for stage, seconds in record.stages.items():
            spent[str(stage)] = spent.get(str(stage), 0.0) + seconds
    other = max(0.0, total - sum(spent.values()))
    ranked = sorted(spent.items(), key=lambda item: (-item[1], item[0]))
    return [Share(name, seconds, seconds / total) for name, seconds in ranked] + [Share(OTHER, other, other / total)]


def summarize(records: Sequence[TimingRecord]) -> Summary:
    """The summary of ``records``: counts per way, host and link mode; the median and sum of the total, of
    each stage, of the lock's and the lease's waits and of the bytes fetched; the cache's hits and misses;
    where the time went."""
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
