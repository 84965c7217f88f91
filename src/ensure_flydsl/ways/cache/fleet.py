"""A fleet pays one build: before build_llvm.sh and build.sh a run takes its turn at the key's lease (trees/lease.py):
a hit, or it builds, or it waits (a dead holder taken over, a failure tried once more, exit 7 at the timeout)."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Callable, Dict, Generic, Iterator, Mapping, Optional, Set, Tuple, TypeVar

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.settings import host_id
from ensure_flydsl.support.report import fmt_seconds
from ensure_flydsl.trees import lease
from ensure_flydsl.trees.backends import CacheError
from ensure_flydsl.trees.remote import Cache, manifest_path
from ensure_flydsl.ways.cache.provider import cache_failed, mlir_from_cache, mlir_place, say_once, usable
from ensure_flydsl.ways.context import Run

T = TypeVar("T")
REPORT_INTERVAL_S = 30.0
CLOCK_SKEW_S = 30.0  # how far ahead a failure's date may be and still be "just now" (NTP keeps clocks closer)
# A holder's build steps, each with its one exit code: the only failures a holder records and a waiter believes.
HOLDER_STAGES = frozenset({Stage.LLVM, Stage.BUILD, Stage.VERIFY})
# Creates refused while the store listed nothing there, before the run builds without the lease: a store whose
# listing misses what it holds cannot be taken turns at.
UNLISTED_TAKES = 2


@dataclass
class Turn(Generic[T]):
    """A run's turn at a key: the entry fetched, or the lease held (both None: build without a lease)."""

    fetched: Optional[T] = None
    held: Optional[lease.HeldLease] = None


def build_failure(stage: object, code: object) -> Optional[Stage]:
    """The stage of a failure a holder records: a build step with that step's exit code, else None ("llvm" with
    exit 0 would end a waiter with exit 0 and no env file)."""
    parsed = Stage.parse(stage)
    return parsed if (parsed is not None and parsed in HOLDER_STAGES and parsed.exit_code is not None
                      and type(code) is int and int(parsed.exit_code) == code) else None


def believed(record: lease.LeaseRecord) -> lease.LeaseRecord:
    """``record``, or an unknown holder's lease when it records a failure no holder of this tool records."""
    failure = record.failure or {}
    if record.state != lease.FAILED or build_failure(failure.get("stage"), failure.get("exit_code")) is not None:
        return record
    unknown = lease.LeaseRecord.unknown(record.kind, record.key, record.generation,
                                        f"its failure {_failure_text(record)} is not a failure of a build step "
                                        "(llvm, build or verify, with that step's exit code)")
    unknown.raw = record.raw
    return unknown


def describe(record: lease.LeaseRecord) -> str:
    """"host-7 (run 20261130-...) building the FlyDSL tree for a35627a2: build 62%, 9 min so far"."""
    shown = record.step or Stage.STARTING
    if record.percent is not None:
        shown += f" {record.percent:g}%"
    return f"{record.who()} building {record.what}: {shown}, {fmt_seconds(record.elapsed_s)} so far"


def take_turn(run: Run, cache: Cache, kind: str, key: str, what: str, fetch: Callable[[], Optional[T]]) -> Turn[T]:
    if not usable(cache, writing=True):
        return Turn()  # read-only (said once when opened) or down for this run: build without a lease
    waiter: Optional[_Waiter] = None
    manifest = manifest_path(kind, key)  # polled by existence: a tree's manifest can be a megabyte
    try:
        honoured, why = lease.exclusive_create(cache.store)
        if not honoured:
            say_once(run, cache, f"cache: {cache.location} does not honour exclusive create ({why}), so hosts "
                     "sharing it cannot take turns at a build; each host that misses builds by itself, as without a "
                     "lease")
            return Turn()
        leases = lease.Leases(cache.store, run.settings.lease_ttl)
        waiter = _Waiter(run=run, leases=leases, kind=kind, key=key, what=what)
        while True:
            if cache.store.exists(manifest):
                # Published by another host (while we waited, or since our miss): a cache hit; an entry we
                # cannot use is built around without a lease, as without one.
                return Turn(fetched=fetch())
            held = waiter.turn()
            if held is not None:
                if not cache.store.exists(manifest):  # nobody published while we took it: this run builds
                    run.say(f"took the build lease on {what} in {cache.store.location} (generation "
                            f"{held.record.generation}); other hosts wait for this build")
                    return Turn(held=held)
                held.release(published=False)  # given back unsaid: the published entry is fetched instead
                continue
            waiter.check_timeout()
            time.sleep(min(1.0, leases.ttl / 8))
    except CacheError as exc:
        cache_failed(run, cache, exc, "the build lease cannot be used now", "building without it")
        return Turn()
    finally:
        if waiter is not None:
            if waiter.followed:
                run.tracker.follow(None, None, None)  # the holder's figures are no longer this run's
            run.facts.waited_for_lease(time.monotonic() - waiter.started if waiter.followed else 0.0)


def mlir_turn(run: Run, cache: Optional[Cache], key: Mapping[str, object], what: str) -> Turn[str]:
    """The turn at an MLIR key's lease (none without a cache): an install another host published is fetched."""
    return Turn() if cache is None else take_turn(run, cache, "mlir", mlir_place(run, key)[0], what,
                                                  lambda: mlir_from_cache(run, cache, key))


class _Waiter:
    """One run's view of a key's lease: take it when free, dead or failed once; else wait and report."""

    def __init__(self, run: Run, leases: lease.Leases, *, kind: str, key: str, what: str) -> None:
        self.run, self.leases, self.kind, self.key, self.what = run, leases, kind, key, what
        self.seen: Dict[int, Tuple[bytes, float]] = {}  # generation: (its bytes, when first seen so)
        self.watched: Set[int] = set()  # generations this run saw being built
        self.started = time.monotonic()  # FLYDSL_LOCK_TIMEOUT counts from the first look, however it waits
        self.holder: Optional[lease.LeaseRecord] = None  # the lease it saw last, for the timeout's message
        self.followed = False
        self.refused = 0  # the newest generation whose create failed: it stands, listed or not
        self.unlisted = 0  # takes that found the generation before them refused yet not listed
        self.reported: Optional[Tuple[int, str]] = None
        self.next_report = 0.0

    def turn(self) -> Optional[lease.HeldLease]:
        found = self.leases.newest(self.kind, self.key)
        self.holder = newest = None if found is None else believed(found)
        if newest is None:
            return self._take(1, 0)
        if newest.invalid is not None and newest.generation not in self.watched:
            self.run.say(f"the lease record {lease.generation_path(self.kind, self.key, newest.generation)} in "
                         f"{self.leases.store.location} is not one this tool writes ({newest.invalid}): it counts "
                         "as the lease of an unknown host, taken over once it has not changed for a TTL")
        if newest.state == lease.FAILED:
            if not self._is_news(newest):
                ahead = (newest.ended or 0.0) - time.time()
                if ahead > CLOCK_SKEW_S:
                    self.run.say(f"the failure record of {newest.who()} on {self.what} is dated {ahead:.0f} s ahead "
                                 "of this host's clock: its date is not believed and the failure is history here")
                return self._take(newest.generation + 1, 0)  # history: a new round
            if newest.failures_before >= 1:
                raise give_up(newest, self.what)
            self.run.say(f"{newest.who()} failed to build {self.what} ({_failure_text(newest)}); trying once here")
            return self._take(newest.generation + 1, newest.failures_before + 1)
        self.watched.add(newest.generation)
        ttl = newest.ttl if newest.ttl > 0 else self.leases.ttl  # the holder's: hosts with other settings agree
        if self._age(newest) > ttl:  # the same bytes for longer than that
            self.run.say(f"the build lease of {newest.who()} on {self.what} is dead: no heartbeat for "
                         f"{ttl:g} s (its FLYDSL_LEASE_TTL); taking it over")
            return self._take(newest.generation + 1, newest.failures_before)
        self._wait(newest)
        return None

    def _take(self, generation: int, failures_before: int) -> Optional[lease.HeldLease]:
        if generation <= self.refused:  # refused a moment ago, yet not listed now: the next, UNLISTED_TAKES times
            self.unlisted += 1
            path = lease.generation_path(self.kind, self.key, self.refused)
            if self.unlisted > UNLISTED_TAKES:
                raise CacheError(f"{path} in {self.leases.store.location} could not be created, yet nothing is "
                                 "listed there: this store cannot be taken turns at")
            self.run.say(f"{path} in {self.leases.store.location} could not be created a moment ago, and nothing is "
                         f"listed there now; taking generation {self.refused + 1} instead")
            generation = self.refused + 1
        self.run.tracker.follow(None, None, None)  # the figures followed so far were the old holder's
        record = lease.LeaseRecord(kind=self.kind, key=self.key, generation=generation, host=host_id(self.run.environ),
                                   run_id=self.run.run_id, pid=os.getpid(), started=time.time(), what=self.what,
                                   failures_before=failures_before, ttl=self.leases.ttl)
        held = self.leases.take(record, self._progress)
        if held is None:
            self.refused = max(self.refused, generation)  # another run's now, or something else stands there
        return held

    def _progress(self) -> Tuple[Optional[str], Optional[float], Optional[float]]:
        """The holder's step, percent and ETA for its heartbeat: the step's own, not the run's."""
        step, percent, eta = self.run.tracker.step_progress()
        return step or self.run.step_name, percent, eta

    def _age(self, record: lease.LeaseRecord) -> float:
        """Seconds since this run first saw these bytes of the record, by its monotonic clock."""
        now = time.monotonic()
        seen = self.seen.get(record.generation)
        if seen is None or seen[0] != record.raw:
            self.seen[record.generation] = (record.raw, now)
            return 0.0
        return now - seen[1]

    def _is_news(self, record: lease.LeaseRecord) -> bool:
        """A failure is news for a TTL after this run first saw it: to a run that watched the build; to a later
        one only when dated within the last TTL (one dated ahead would stop newcomers while that clock is)."""
        if self._age(record) > self.leases.ttl:
            return False
        if record.generation in self.watched:
            return True
        age = time.time() - (record.ended or 0.0)
        return -CLOCK_SKEW_S <= age <= self.leases.ttl

    def _wait(self, holder: lease.LeaseRecord) -> None:
        now = time.monotonic()
        self.followed = True
        text = describe(holder)
        if (holder.generation, holder.host) != self.reported or now >= self.next_report:
            self.reported = (holder.generation, holder.host)
            self.next_report = now + REPORT_INTERVAL_S
            self.run.say(f"waiting for {text}; this run fetches the result when it is published")
        self.run.tracker.follow({"host": holder.host, "run_id": holder.run_id, "pid": holder.pid,
                                 "what": holder.what, "step": holder.step, "percent": holder.percent,
                                 "elapsed_s": holder.elapsed_s, "text": text}, holder.percent, holder.eta_s)
        if holder.percent is not None:
            self.run.reporter.progress(self.run.step_name, holder.percent, holder.eta_s)

    def check_timeout(self) -> None:
        """Exit 7 once FLYDSL_LOCK_TIMEOUT has passed since the first look."""
        timeout = self.run.settings.lock_timeout
        waited = time.monotonic() - self.started
        if timeout is None or waited < timeout:
            return
        holder = self.holder if self.holder is not None and self.holder.state == lease.BUILDING else None
        if holder is None:
            text, hint = f"the build lease on {self.what}", "the lines above say why it was not taken"
        elif holder.invalid is not None:
            text, hint = describe(holder), (f"the record there is not one this tool writes ({holder.invalid}); it "
                                            "is taken over once it has not changed for a TTL (FLYDSL_LEASE_TTL)")
        else:
            text, hint = describe(holder), f"that host ({holder.host}, run {holder.run_id}) is building " \
                f"{holder.what} for the whole fleet"
        label = self.run.settings.label("lock_timeout")
        raise EnsureError(ExitCode.LOCK, f"waited {fmt_seconds(waited)} for {text}; {label}={timeout:g} s ran out",
                          stage=Stage.LEASE,
                          hint=f"{hint}; run again later to fetch it from the cache, or raise FLYDSL_LOCK_TIMEOUT")


def give_up(record: lease.LeaseRecord, what: str) -> EnsureError:
    """What ends a waiter after a key's second failure: the holder's stage and exit code."""
    failure = record.failure or {}
    stage = build_failure(failure.get("stage"), failure.get("exit_code"))
    code = stage.exit_code if stage is not None and stage.exit_code is not None else ExitCode.LOCK
    return EnsureError(code, f"{what} failed twice in the fleet, last on {record.who()}: {_failure_text(record)}",
                       stage=stage or Stage.LEASE,
                       hint=f"read the log of run {record.run_id} on {record.host}; the failure is not this host's. "
                       "Once the cause is fixed, run again (a failure record stops the fleet for FLYDSL_LEASE_TTL "
                       "seconds)")


def _failure_text(record: lease.LeaseRecord) -> str:
    failure = record.failure or {}
    return f"stage {failure.get('stage')}, exit {failure.get('exit_code')}: {failure.get('reason')}"


def end_turn(held: Optional[lease.HeldLease], error: Optional[BaseException]) -> None:
    """After a holder's build and publish: release the lease, or record how the build failed."""
    if held is None:
        return
    if isinstance(error, EnsureError) and build_failure(error.stage, int(error.code)) is not None:
        held.fail(error.stage, int(error.code), error.reason)
    else:  # after Ctrl-C, a bug, this host's own disk: no reason for the fleet to stop; a waiter takes over at once
        held.release(published=error is None)


@contextlib.contextmanager
def holding(held: Optional[lease.HeldLease]) -> Iterator[None]:
    """The body builds and publishes under ``held``; the lease ends with it, however it ends."""
    try:
        yield
    except BaseException as exc:
        end_turn(held, exc)
        raise
    end_turn(held, None)
