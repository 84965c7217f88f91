"""The build lease: hosts that miss one key at once pay one build.  Exclusive create of generation n+1 under
``leases/<kind>/<key>/`` takes it, heartbeats keep it, a TTL of unchanged bytes on the waiter's clock hands it over."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

from ensure_flydsl.support.fields import (
    MAX_SECONDS,
    SHORT_TEXT_MAX,
    checked,
    eta,
    integer,
    json_object,
    number,
    one_of,
    percent,
    read,
    seconds,
    short_text,
    shown,
    within,
)
from ensure_flydsl.trees.backends import CacheCorrupt, CacheError, CacheUnreachable, Store
from ensure_flydsl.trees.manifest import check_name

BUILDING, FAILED = "building", "failed"
# FLYDSL_LEASE_TTL's bounds: ``ttl: Infinity`` would make every waiter wait for ever for a holder that died, and a
# holder of a TTL below a second beats in a tight loop (a record with one is an unknown holder's, waited for by ours).
MIN_TTL_S, MAX_TTL_S = 1.0, 10.0**6
MAX_RECORD_BYTES = 64 << 10  # this tool writes a few hundred bytes
MAX_REASON = 2000  # the holder writes at most this much of its failure's reason
UNKNOWN_HOST = "an unknown host"
# The exit codes a failure record may carry: a build step's (2 to 8).  A waiter ends with the recorded code, so
# 0, 75 (sends an agent back to `wait` for ever), 130 or 9 would be a lie to its caller.
FAILURE_EXIT_CODES = range(2, 9)
LEASES = "leases"
# 10 digits, more past 9999999999 (one number, one name); at most 18: a planted name cannot make a take endless.
_GENERATION = re.compile(r"^(\d{10}|[1-9]\d{10,17})\.json\Z")
MAX_GENERATION = 10**18 - 1
# What a writer killed in the middle leaves: a heartbeat's staged copy of its generation, an exclusive create's.
_STAGED = re.compile(r"^\.?(\d{10}|[1-9]\d{10,17})\.json\..+\.tmp\Z")
_CREATE_STAGED = re.compile(r"^\.create\..+\.tmp\Z")
STAGED_AGE_S = 600.0  # a create's staged file older than this is no live writer's (it lives for a write)
_PROBED: Dict[str, Tuple[bool, str]] = {}

Progress = Callable[[], Tuple[Optional[str], Optional[float], Optional[float]]]  # step, percent, ETA


def _ttl(value: object) -> Optional[float]:
    found = number(value)
    return found if found is not None and (found == 0 or MIN_TTL_S <= found < MAX_TTL_S) else None  # 0: not said


_TEXT = f"a text of 1 to {SHORT_TEXT_MAX} printable characters"  # FLYDSL_HOST_ID is held to the same rule
_TIME = "a time in seconds"
_LATER = f"a number from 0 to {MAX_SECONDS:g}"


def _failure(value: object) -> Optional[Dict[str, object]]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("failure is not an object")
    stage = value.get("stage")
    if stage is not None and short_text(stage) is None:
        raise ValueError(f"stage {shown(stage)} is not {_TEXT}")
    code = value.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool) or code not in FAILURE_EXIT_CODES:
        raise ValueError(f"failure exit_code {shown(code)} is not a build step's (2 to 8)")
    reason = value.get("reason")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValueError("failure reason is not a text")
    # Messages are one line each: the reason's line breaks and control characters become spaces.
    return {"stage": short_text(stage), "exit_code": code,
            "reason": "".join(c if c.isprintable() else " " for c in reason)}


@dataclass
class LeaseRecord:
    """One generation of a key's lease: who builds what, and how far (or how it failed)."""

    kind: str
    key: str
    generation: int
    host: str = checked(short_text, wanted=_TEXT)
    run_id: str = checked(short_text, wanted=_TEXT)
    pid: int = checked(within(integer, 0, 2**31), wanted=f"a whole number from 0 to {2**31}")
    started: float = checked(seconds, wanted=_TIME)  # the holder's wall clock when it took the lease, for people
    what: str = checked(short_text, wanted=_TEXT)  # "the FlyDSL tree for a35627a2", for messages
    # Recorded failures of this key before this generation, in this round.
    failures_before: int = checked(within(integer, 0, 10**6), 0, wanted=f"a whole number from 0 to {10**6}")
    # The holder's FLYDSL_LEASE_TTL: it beats every ttl/4 and is dead after ttl without one.
    ttl: float = checked(_ttl, 0.0, wanted=f"what FLYDSL_LEASE_TTL allows ({MIN_TTL_S:g} <= ttl < {MAX_TTL_S:g} s)")
    state: str = checked(lambda v: one_of(v, (BUILDING, FAILED)), BUILDING, wanted=f"{BUILDING} or {FAILED}")
    beat: int = checked(within(integer, 0, 2**62), 0, wanted=f"a whole number from 0 to {2**62}")
    heartbeat: float = checked(seconds, 0.0, wanted=_TIME)  # the holder's wall clock at its last beat, for people
    # The holder's monotonic seconds since it took the lease, at its last beat.
    elapsed_s: float = checked(seconds, 0.0, wanted=_TIME)
    step: Optional[str] = checked(short_text, None, wanted=_TEXT)
    percent: Optional[float] = checked(percent, None, wanted="a number from 0 to 100")
    eta_s: Optional[float] = checked(eta, None, wanted=_LATER)
    failure: Optional[Dict[str, object]] = checked(_failure, None)  # stage, exit_code, reason
    ended: Optional[float] = checked(seconds, None, wanted=_LATER)
    raw: bytes = field(default=b"", repr=False, compare=False)  # as read: liveness compares it
    invalid: Optional[str] = field(default=None, repr=False, compare=False)  # why it was refused

    def to_bytes(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if k not in ("raw", "invalid")}
        return (json.dumps(data, sort_keys=True) + "\n").encode()

    @classmethod
    def unknown(cls, kind: str, key: str, generation: int, why: str) -> "LeaseRecord":
        return cls(kind, key, generation, UNKNOWN_HOST, "?", 0, 0.0, f"the {kind} {key[:12]}", invalid=why)

    @classmethod
    def from_bytes(cls, data: bytes, kind: str, key: str, generation: int) -> "LeaseRecord":
        """The record (as read, at most MAX_RECORD_BYTES); an unreadable or invalid one reads as an unknown holder's."""
        try:
            obj = json_object(data)
            if obj.get("kind") != kind or obj.get("key") != key:
                raise ValueError("it names another kind or key")
            record = read(cls, obj, kind=kind, key=key, generation=generation)
            if record.state == FAILED and (record.failure is None or record.ended is None):
                raise ValueError("a failure record without its failure or its end")
        except ValueError as exc:
            record = cls.unknown(kind, key, generation, str(exc))
        record.raw = data
        return record

    def who(self) -> str:
        return f"{self.host} (run {self.run_id})"


def lease_folder(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"{LEASES}/{kind}/{key}"


def generation_path(kind: str, key: str, generation: int) -> str:
    return f"{lease_folder(kind, key)}/{generation:010d}.json"


def exclusive_create(store: Store) -> Tuple[bool, str]:
    """Whether the store refuses a second create of one object, and if not, why (probed once per location)."""
    known = _PROBED.get(store.location)
    if known is not None:
        return known
    rel = f"{LEASES}/probe-{uuid.uuid4().hex}.json"
    try:
        first = store.create_exclusive(rel, b"first\n")
        second = store.create_exclusive(rel, b"second\n")
        if not first:
            found = (False, "a create of a new object reported that it existed")
        elif second:
            found = (False, "a second create of one object succeeded instead of failing")
        else:
            found = (True, "")
    except CacheUnreachable:
        raise  # not an answer about the store: the run goes on without the cache (and probes next time)
    except CacheError as exc:
        found = (False, str(exc))
    finally:
        with contextlib.suppress(CacheError):
            store.remove(rel)
    _PROBED[store.location] = found
    return found


@dataclass
class Leases:
    """The leases of one cache; ``ttl`` is FLYDSL_LEASE_TTL."""

    store: Store
    ttl: float

    def generations(self, kind: str, key: str) -> List[int]:
        """The generations there are: whatever stands at a generation's name counts (its create would fail)."""
        matches = (_GENERATION.match(name) for name in self.store.list_names(lease_folder(kind, key)))
        return sorted({int(match.group(1)) for match in matches if match})

    def newest(self, kind: str, key: str) -> Optional[LeaseRecord]:
        for generation in reversed(self.generations(kind, key)):
            try:
                data = self.store.read_bytes(generation_path(kind, key, generation), MAX_RECORD_BYTES)
            except CacheCorrupt as exc:  # a FIFO, a link: no record, but it stands there like one
                return LeaseRecord.unknown(kind, key, generation, exc.reason)
            if data is not None:  # else removed since the listing
                return LeaseRecord.from_bytes(data, kind, key, generation)
        return None

    def take(self, record: LeaseRecord, progress: Progress) -> Optional["HeldLease"]:
        """Create ``record``'s generation exclusively; the held lease, or None when another run got there first."""
        if record.generation > MAX_GENERATION:
            raise CacheError(f"the lease of {record.what} is at generation {record.generation - 1}, which no run of "
                             f"this tool reaches (a planted record?); remove {lease_folder(record.kind, record.key)} "
                             "from the cache")
        path = generation_path(record.kind, record.key, record.generation)
        record.heartbeat = time.time()
        record.step, record.percent, record.eta_s = progress()
        if not self.store.create_exclusive(path, record.to_bytes()):
            return None
        if any(g > record.generation for g in self.generations(record.kind, record.key)):
            self.store.remove(path)  # taken from an older listing: the newest generation is the lease
            return None
        self.clear(record.kind, record.key, below=record.generation)
        return HeldLease(self, record, progress)

    def clear(self, kind: str, key: str, *, below: int) -> None:
        """Remove the generations below ``below`` and what killed writers of them left."""
        now = time.time()
        folder = lease_folder(kind, key) + "/"
        for stored in self.store.list_files(folder[:-1]):
            name = stored.path[len(folder):]
            if not stored.path.startswith(folder) or "/" in name:
                continue  # inside something at a generation's name (a folder, an S3 prefix): not the tool's
            numbered = _GENERATION.match(name) or _STAGED.match(name)
            if numbered is not None:
                gone = int(numbered.group(1)) < below
            else:
                gone = bool(_CREATE_STAGED.match(name)) and stored.mtime is not None and \
                    now - stored.mtime > STAGED_AGE_S
            if gone:
                self.store.remove(stored.path)


class HeldLease:
    """A lease this run holds: from its making, a thread beats every TTL/4 until :meth:`fail` or :meth:`release`."""

    def __init__(self, leases: Leases, record: LeaseRecord, progress: Progress) -> None:
        self.leases = leases
        self.record = record
        self.progress = progress
        self.path = generation_path(record.kind, record.key, record.generation)
        self._taken = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._beat_until_stopped, name="lease-heartbeat", daemon=True)
        self.ended = False
        self.lost = False  # another run took the key over: stop beating
        self._thread.start()

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.leases.ttl / 4):
            self.beat()

    def beat(self) -> None:
        with self._lock:
            if self.ended or self.lost:
                return
            record = self.record
            record.step, record.percent, record.eta_s = self.progress()
            record.beat += 1
            record.heartbeat = time.time()
            record.elapsed_s = round(time.monotonic() - self._taken, 1)
            with contextlib.suppress(CacheError):  # the next beat tries again; a TTL without one hands it over
                if self.leases.generations(record.kind, record.key)[-1:] != [record.generation]:
                    # Taken over or cleared: writing would resurrect a generation nobody removes again.
                    self.lost = True
                    return
                self.leases.store.put_bytes(self.path, record.to_bytes())

    def _end(self) -> bool:
        with self._lock:
            if self.ended:
                return False
            self.ended = True
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        return True

    def fail(self, stage: Optional[str], exit_code: int, reason: str) -> None:
        """Record the failure for the waiters (the record stays; it is no lease any more)."""
        if not self._end() or self.lost:
            return  # ended already, or the key is another run's now: its record, not ours, is the news
        record = self.record
        record.state, record.ended = FAILED, time.time()
        record.failure = {"stage": stage, "exit_code": exit_code, "reason": reason[:MAX_REASON]}
        record.elapsed_s = round(time.monotonic() - self._taken, 1)
        try:
            self.leases.store.put_bytes(self.path, record.to_bytes())
        except CacheError:
            # No record: a waiter takes over at once, as after Ctrl-C; else, after a TTL without a heartbeat.
            with contextlib.suppress(CacheError):
                self.leases.store.remove(self.path)

    def release(self, *, published: bool) -> None:
        """Give the lease up: published, every generation up to ours goes; interrupted, only ours."""
        if not self._end():
            return
        with contextlib.suppress(CacheError):  # else the heartbeat stopped: the waiters take over after a TTL
            if published:
                self.leases.clear(self.record.kind, self.record.key, below=self.record.generation + 1)
            else:
                self.leases.store.remove(self.path)
