"""The build lease: hosts sharing one cache that miss the same key at once pay one build, not one each.

Objects, beside the entries in the cache::

    <cache>/leases/<kind>/<key>/<generation>.json     the lease of one builder of kind/key (10 digits,
                                                      more past 9999999999; binary_cache/lease_record.py)

- **Take**: create generation n+1 exclusively (S3's ``If-None-Match: *`` through fsspec's ``open(path,
  "xb")``; link(2) of a complete temporary file in a folder), n being the newest there is (0 for none).
  Two runs that race for one generation: one create succeeds, the other gets FileExistsError.  The newest
  generation is the lease: a taker that finds a newer generation after its create yields it at once.
  Whatever stands at a generation's name is that generation (a folder, a link, a FIFO: its create fails;
  :meth:`Leases.generations`), read as an unknown holder's lease.
- **Heartbeat**: the holder rewrites its own generation every TTL/4 seconds (a plain overwrite; only the
  holder writes it) with a beat counter, its step, percent, ETA and seconds since it took the lease.
- **Dead**: a waiter that sees the same bytes of a lease for longer than the TTL **by its own monotonic
  clock** takes over with the next generation.  No clock of two hosts is compared for liveness.
- **Failure**: the holder rewrites its generation with state ``failed`` and the stage, exit code and reason
  of a build step's failure (any other failure removes its generation, as an interrupt does);
  the record is no lease any more (nobody holds it) but news for the waiters: the first failure is tried
  once more by one waiter, the second one ends them.  A failure record is news for at most a TTL after
  the reader first saw it, **by the reader's own monotonic clock** (providers/fleet.py): to a run that
  watched the key while it was being built, always; to a run that comes later, only when the writer's
  wall clock dates it within the last TTL.  A record dated in the future (a host whose clock is ahead) is
  history to a newcomer: it cannot stop the fleet for as long as that clock is ahead, it costs one build.
- **Release**: after publishing, the holder removes every generation up to its own; interrupted, only its
  own.  A taker removes the generations below its own once it holds the lease.

A store that does not honour exclusive create (a second create of one object succeeds) is found by a
probe once per cache location and process; the run then builds without a lease (:func:`exclusive_create`).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional, Tuple

from ensure_flydsl.binary_cache.lease_record import BUILDING, FAILED, MAX_REASON, MAX_RECORD_BYTES, LeaseRecord
from ensure_flydsl.binary_cache.manifest import check_name
from ensure_flydsl.binary_cache.store import CacheCorrupt, CacheError, CacheUnreachable, Store

__all__ = ["BUILDING", "FAILED", "HeldLease", "LeaseRecord", "Leases", "exclusive_create", "generation_path"]
LEASES = "leases"
# A generation's name: 10 digits, more once past 9999999999 (no leading zero then, so one number has one
# name); at most 18, so a planted name cannot make a number Python refuses to read or a take that never ends.
_GENERATION = re.compile(r"^(\d{10}|[1-9]\d{10,17})\.json\Z")
MAX_GENERATION = 10**18 - 1
# What a writer killed in the middle leaves beside the records: a heartbeat's staged copy of its generation
# (support/files.py: atomic_write's ".NAME.<random>.tmp"; an fsspec folder store's "NAME.<hex>.tmp"), and an
# exclusive create's ".create.<random>.tmp" (binary_cache/folder.py), which names no generation.
_STAGED = re.compile(r"^\.?(\d{10}|[1-9]\d{10,17})\.json\..+\.tmp\Z")
_CREATE_STAGED = re.compile(r"^\.create\..+\.tmp\Z")
STAGED_AGE_S = 600.0  # a create's staged file older than this is no live writer's (it lives for a write)
_PROBED: Dict[str, Tuple[bool, str]] = {}

Progress = Callable[[], Tuple[Optional[str], Optional[float], Optional[float]]]  # step, percent, ETA


def lease_folder(kind: str, key: str) -> str:
    check_name(kind, key)
    return f"{LEASES}/{kind}/{key}"


def generation_path(kind: str, key: str, generation: int) -> str:
    return f"{lease_folder(kind, key)}/{generation:010d}.json"


def exclusive_create(store: Store) -> Tuple[bool, str]:
    """Whether the store refuses a second create of one object, and if not, why; probed once per location
    and process (two small objects written and removed)."""
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
        try:
            store.remove(rel)
        except CacheError:
            pass
    _PROBED[store.location] = found
    return found


class Leases:
    """The leases of one cache; ``ttl`` is FLYDSL_LEASE_TTL."""

    def __init__(self, store: Store, ttl: float) -> None:
        self.store = store
        self.ttl = ttl

    def generations(self, kind: str, key: str) -> List[int]:
        """The generations there are: whatever stands at a generation's name counts as that generation (a
        record, or a folder, a link or a FIFO somebody put there: its create would fail, so a taker that
        did not count it would try it for ever; :meth:`newest` reads it as an unknown holder's lease)."""
        found = set()
        for name in self.store.list_names(lease_folder(kind, key)):
            match = _GENERATION.match(name)
            if match:
                found.add(int(match.group(1)))
        return sorted(found)

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
        """Create ``record``'s generation exclusively; the held lease (heartbeat running), or None when
        another run created it or a newer one first."""
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
        held = HeldLease(self, record, progress)
        held.start()
        return held

    def clear(self, kind: str, key: str, *, below: int) -> None:
        """Remove the generations below ``below``, with what killed writers of them left (their staged
        copies; an exclusive create's staged file once it is old): no lease object outlives its runs."""
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
    """A lease this run holds: a thread beats every TTL/4 until :meth:`fail` or :meth:`release`."""

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

    def start(self) -> None:
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
            try:
                if self.leases.generations(record.kind, record.key)[-1:] != [record.generation]:
                    # Taken over (our beats were late by a TTL) or cleared: writing would resurrect a
                    # generation nobody removes again.  The build goes on; both publish the same entry.
                    self.lost = True
                    return
                self.leases.store.put_bytes(self.path, record.to_bytes())
            except CacheError:
                pass  # the next beat tries again; a TTL without one hands the build to a waiter

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
        if not self._end():
            return
        if self.lost:
            return  # the key is another run's now: its record, not ours, is the news
        record = self.record
        record.state, record.ended = FAILED, time.time()
        record.failure = {"stage": stage, "exit_code": exit_code, "reason": reason[:MAX_REASON]}
        record.elapsed_s = round(time.monotonic() - self._taken, 1)
        try:
            self.leases.store.put_bytes(self.path, record.to_bytes())
        except CacheError:
            try:
                self.leases.store.remove(self.path)  # no record: a waiter takes over at once, as after Ctrl-C
            except CacheError:
                pass  # the heartbeat stopped: the waiters take over after a TTL

    def release(self, *, published: bool) -> None:
        """Give the lease up: with the entry published, every generation up to ours goes (nobody needs its
        history any more); without (interrupted), only ours, and a waiter takes over at once."""
        if not self._end():
            return
        try:
            if published:
                self.leases.clear(self.record.kind, self.record.key, below=self.record.generation + 1)
            else:
                self.leases.store.remove(self.path)
        except CacheError:
            pass  # the heartbeat stopped: the waiters take over after a TTL
