"""Where each run's time went: one timing record per run, kept per host, for ``ensure-flydsl stats``.

``<host cache>/runs/<run id>.json`` (``layout.timings_dir``): each stage's wall time, the bytes the run
fetched, the binary cache's hits and misses, how the host store linked the tree, the lock's and the build
lease's waits, and the way the run took.  One file per run, written once and atomically (``atomic_write``):
runs that end together never share a file, so nothing is locked, no record can be torn, and a fleet
collects the records by copying the folders together (run ids do not collide).  A JSON Lines file would
need an flock for every append and for its rotation, on NFS too, and one bad line would be read past by
hand.  The folder is kept bounded by the writer: the newest KEEP_RUNS records of the last KEEP_DAYS days
(only files named as records are removed; anything else there is left alone).

Records are outside data when read back (a fleet's copy, a hand edit, another version): each is parsed
field by field, for what its values mean (``from_json``); a file that is not a record is skipped and
counted, never a traceback.  Writing is best effort: a record that cannot be written costs the statistics,
never the run.  The warm call writes none (it stays at its floor, and a host's warm calls, one per agent
step, would push its real runs out of the bounded folder).
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ensure_flydsl.errors import FAILURE_CODES, Plan, Stage
from ensure_flydsl.layout import RUN_RECORD_SUFFIX, timing_file
from ensure_flydsl.result import LINK_MODES as LINK_MODES  # how the host store gives a root its tree
from ensure_flydsl.runs.records import KINDS, RunRecord, is_new_run_id, is_run_id
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write_json, read_regular

TIMING_VERSION = 1
KEEP_RUNS = 500  # a few hundred KB: a month of a busy host's runs
KEEP_DAYS = 30.0
MAX_RECORD_BYTES = 256 << 10  # a record is a few KB; a larger file is not one (and costs no memory)
ROUNDING_S = 0.001  # a record's seconds are rounded to milliseconds: its stages may add up to a little more
MAX_BYTES = 1 << 50  # a fetch of more than a pebibyte is no run's
# The way a run took: what its call did (result.py: Action), the tree's origin when it made one (How), or failed.
WARM, VERIFIED, REUSED, BUILT, RELEASED, CACHED, FAILED = (
    "warm", "verified", "reused", "built", "released", "cached", "failed")
WAYS = (WARM, VERIFIED, REUSED, BUILT, RELEASED, CACHED, FAILED)
FETCHES = ("git", "wheel", "cache")  # the pin's objects, the release wheel, the binary cache's blobs
LOOKUPS = ("tree", "mlir")  # what a run looks up in the binary cache
HIT, MISS = "hit", "miss"


@dataclass
class RunFacts:
    """What a run learns as it goes, for its timing record (``Run.facts``): the providers add to it."""

    route: Optional[Plan] = None  # the way a provider took (Run.plan)
    fetched: Dict[str, int] = field(default_factory=dict)  # FETCHES: bytes
    cache: Dict[str, str] = field(default_factory=dict)  # LOOKUPS: HIT or MISS (the last one)
    lease_wait_s: Optional[float] = None  # None: the run took no turn at a build lease

    def add_fetched(self, what: str, size: Optional[int]) -> None:
        """``size`` bytes more fetched by ``what`` (one of FETCHES); an unknown size records nothing."""
        if size is not None and size >= 0:
            self.fetched[what] = self.fetched.get(what, 0) + size

    def looked_up(self, what: str, hit: bool) -> None:
        self.cache[what] = HIT if hit else MISS

    def waited_for_lease(self, seconds: float) -> None:
        self.lease_wait_s = (self.lease_wait_s or 0.0) + max(0.0, seconds)


@dataclass(frozen=True)
class TimingRecord:
    """``<run id>.json`` in the host's ``runs/``: where one run's time went (docs/schema/timing.schema.json)."""

    run_id: str
    host: str
    root: str
    kind: str  # runs/records.py: KINDS
    started: float  # wall clock, seconds since the epoch
    ended: float
    exit_code: int  # 0, or the code a failed run records (errors.FAILURE_CODES)
    way: str  # WAYS; FAILED exactly when exit_code is not 0
    stages: Mapping[Stage, float]  # each stage's seconds (a stage gone through twice: both added up)
    stage: Optional[Stage] = None  # where a failed run stopped
    route: Optional[Plan] = None  # the way a provider took (None: none did)
    pin: Optional[str] = None
    tool: Optional[str] = None  # ensure-flydsl's version that wrote it
    fetched: Mapping[str, int] = field(default_factory=dict)
    cache: Mapping[str, str] = field(default_factory=dict)
    link_mode: Optional[str] = None
    lock_wait_s: Optional[float] = None  # None: the run did not go for the lock
    lease_wait_s: Optional[float] = None  # None: it took no turn at a build lease

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
            "link_mode": self.link_mode, "lock_wait_s": _rounded(self.lock_wait_s),
            "lease_wait_s": _rounded(self.lease_wait_s),
        }

    @classmethod
    def from_json(cls, data: object) -> Optional["TimingRecord"]:
        """The record, or None for a file that is not one: this version's, every field of its type and its
        meaning (a run id, a printable host, an absolute root, times in order, stages that fit in them, an
        exit code a run ends with and a way that agrees with it, durations and byte counts in range).  A stage
        this version does not know is left out; ``total_s`` and ``bytes_fetched`` are derived, not read."""
        if not isinstance(data, dict) or fields.integer(data.get("version")) != TIMING_VERSION:
            return None
        run_id, host, root = data.get("run_id"), fields.short_text(data.get("host")), fields.absolute_path(
            data.get("root"))
        kind, way = fields.one_of(data.get("kind"), KINDS), fields.one_of(data.get("way"), WAYS)
        started, ended = fields.seconds(data.get("started")), fields.seconds(data.get("ended"))
        code = fields.integer(data.get("exit_code"))
        if (not is_run_id(run_id) or host is None or root is None or kind is None or way is None
                or started is None or ended is None or ended < started or code is None
                or (code != 0 and code not in FAILURE_CODES) or (way == FAILED) != (code != 0)):
            return None
        stages, stage, route = _stages(data.get("stages")), data.get("stage"), data.get("route")
        fetched = _table(data.get("fetched"), FETCHES, _byte_count)
        cache = _table(data.get("cache"), LOOKUPS, lambda v: fields.one_of(v, (HIT, MISS)))
        plan = Plan._value2member_map_.get(route) if isinstance(route, str) else None
        optional = {name: data.get(name) for name in ("pin", "tool", "link_mode", "lock_wait_s", "lease_wait_s")}
        checked = {"pin": fields.short_text(optional["pin"]), "tool": fields.short_text(optional["tool"]),
                   "link_mode": fields.one_of(optional["link_mode"], LINK_MODES),
                   "lock_wait_s": fields.seconds(optional["lock_wait_s"]),
                   "lease_wait_s": fields.seconds(optional["lease_wait_s"])}
        if (stages is None or sum(stages.values()) > ended - started + ROUNDING_S * (len(stages) + 2)
                or fetched is None or cache is None or (stage is not None and fields.text(stage) is None)
                or (route is not None and plan is None)
                or any(checked[n] is None and optional[n] is not None for n in optional)):
            return None
        return cls(run_id=str(run_id), host=host, root=root, kind=kind, started=started, ended=ended, exit_code=code,
                   way=way, stages=stages, stage=Stage.parse(stage), route=plan,  # type: ignore[arg-type]
                   fetched=fetched, cache=cache, **checked)  # type: ignore[arg-type]


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


def _stages(value: object) -> Optional[Dict[Stage, float]]:
    """Each stage's seconds; a stage this version does not know (a newer file) is left out."""
    if not isinstance(value, dict):
        return None
    found: Dict[Stage, float] = {}
    for name, seconds in value.items():
        checked = fields.seconds(seconds)
        if checked is None:
            return None
        stage = Stage.parse(name)
        if stage is not None:
            found[stage] = checked
    return {stage: found[stage] for stage in Stage if stage in found}  # in the order a run goes through them


def _byte_count(value: object) -> Optional[int]:
    found = fields.integer(value)
    return found if found is not None and 0 <= found <= MAX_BYTES else None


def _table(value: object, names: Tuple[str, ...], check: Callable[[object], object]) -> Optional[Dict[str, object]]:
    """An object whose keys are some of ``names`` and whose values pass ``check``, else None."""
    if not isinstance(value, dict) or not set(value) <= set(names):
        return None
    found = {name: check(v) for name, v in value.items()}
    return None if any(v is None for v in found.values()) else found


def of_dead_run(dead: RunRecord, host: str) -> Optional[TimingRecord]:
    """The timing record of a run that died (kill -9, the OOM killer), from its run record as its death made
    it (``liveness.record_death``): its steps' times, exit 9, the step it died in; what only the run knew
    (bytes, cache hits, the way it took) is not known.  None for a record that cannot say it."""
    failure, ended = dead.failure, dead.finished
    if failure is None or ended is None or ended < dead.started or not dead.root.startswith("/"):
        return None
    stages: Dict[Stage, float] = {}
    steps = list(dead.steps)
    for index, step in enumerate(steps):
        # A step without its end ended when the next began (the tracker notes the step it was in when the run
        # became tracked, and never its end), the last one when the run last gave a sign of life.
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


def _record_names(folder: str) -> List[str]:
    """The names the tool gives records (``new_run_id``'s shape): nothing else there is its own to remove."""
    return [n for n in os.listdir(folder) if n.endswith(RUN_RECORD_SUFFIX)
            and is_new_run_id(n[:-len(RUN_RECORD_SUFFIX)])]


def prune(folder: str, *, keep_runs: int = KEEP_RUNS, keep_days: float = KEEP_DAYS) -> None:
    """Remove the records beyond the newest ``keep_runs``, and those older than ``keep_days`` (by their
    files' times: no record is read).  Only regular files named as the tool names records are removed; runs pruning at
    once each remove what the other did not (a record already gone is fine)."""
    try:
        names = _record_names(folder)
    except OSError:
        return
    dated: List[Tuple[float, str]] = []
    for name in names:
        try:
            st = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            dated.append((st.st_mtime, name))
    dated.sort(reverse=True)
    oldest = time.time() - keep_days * 86400.0
    for index, (mtime, name) in enumerate(dated):
        if index >= keep_runs or mtime < oldest:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


@dataclass(frozen=True)
class Skipped:
    """A file in the records' folder that is not a timing record this version reads, and why."""

    path: str
    why: str


def read_records(folder: str) -> Tuple[List[TimingRecord], List[Skipped]]:
    """The timing records in ``folder``, oldest first, and the files skipped (torn, foreign, another
    version's, not a regular file); a missing folder holds none.  Hidden files (an atomic write's
    temporary file) are neither."""
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return [], []
    except OSError as exc:  # another user's folder, a file planted at its name
        return [], [Skipped(folder, f"the folder cannot be listed ({exc.strerror or exc})")]
    records: List[TimingRecord] = []
    skipped: List[Skipped] = []
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        record, why = _read(path)
        if record is not None:
            records.append(record)
        else:
            skipped.append(Skipped(path, why))
    records.sort(key=lambda r: (r.started, r.run_id))
    return records, skipped


def _read(path: str) -> Tuple[Optional[TimingRecord], str]:
    raw = read_regular(path, MAX_RECORD_BYTES)
    if raw is None:
        return None, "not a regular file of at most 256 KiB"
    try:
        data = json.loads(raw.decode())
    except (ValueError, RecursionError):
        return None, "not JSON (torn or foreign)"
    record = TimingRecord.from_json(data)
    if record is None:
        version = fields.integer(data.get("version")) if isinstance(data, dict) else None
        newer = version is not None and version > TIMING_VERSION
        return None, f"a newer version's record (version {version})" if newer else "not a timing record"
    return record, ""
