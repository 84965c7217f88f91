"""Run records in ``$(dirname ROOT)/.ensure_flydsl/runs/<root name>/``: ``<run_id>.json`` (for ``status``, ``wait``),
``.alive`` (flocked while it lives), ``.reserve`` (room for last words on a full disk), ``current`` (the latest id)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Dict, List, Optional

from ensure_flydsl.errors import Stage, StrEnum
from ensure_flydsl.layout import (
    RUN_RECORD_SUFFIX,
    base_state_dir,
    current_run_file,
    run_alive_file,
    run_record_file,
    run_reserve_file,
    runs_dir,
)
from ensure_flydsl.runs.markers import Failure
from ensure_flydsl.settings import Request
from ensure_flydsl.support import fields
from ensure_flydsl.support.fields import checked
from ensure_flydsl.support.files import atomic_write, json_bytes, read_json, read_regular, remove_quietly


class RunState(StrEnum):
    """Where a run is: running, or ended in success or failure."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


RUNNING, SUCCEEDED, FAILED = RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED
KINDS = ("blocking", "detached")
KEEP_RECORDS = 20
STRAY_AGE_S = 600.0  # a run's alive file is created a moment before it is flocked: one this old and free is a leftover
# Room for a run's last words (its final record, the failure marker) on file systems of blocks up to 16 KiB;
# random bytes, which a compressing file system counts too.
RESERVE_BYTES = 64 << 10


@dataclass
class RunRecord(fields.Record):
    """``<run_id>.json``: what one run is doing, or how it ended.  A value no run writes refuses the whole file."""

    run_id: str = checked(lambda v: v if is_run_id(v) else None)
    root: str = checked(fields.path)
    request: Request = checked(Request.from_json)
    kind: str = checked(lambda v: fields.one_of(v, KINDS), "blocking")
    pid: Optional[int] = checked(fields.pid, None)
    pid_start: Optional[str] = checked(fields.text, None)  # the kernel's start time of pid, to tell a reused pid
    host: str = checked(fields.text, "")
    state: RunState = checked(fields.member(RunState), RunState.RUNNING)
    step: Optional[Stage] = checked(fields.text, None, convert=Stage.parse)  # None also for a step not known
    percent: Optional[float] = checked(fields.percent, None)
    eta_s: Optional[float] = checked(fields.eta, None)
    overdue_s: Optional[float] = checked(fields.seconds, None)  # the step is this far past its usual time
    started: float = checked(fields.seconds, 0.0)
    finished: Optional[float] = checked(fields.seconds, None)
    updated: Optional[float] = checked(fields.seconds, None)  # its last sign of life
    steps: List[Dict[str, object]] = checked(
        lambda v: list(v) if isinstance(v, list) and all(isinstance(s, dict) for s in v) else None, factory=list)
    log: str = checked(fields.path, "")
    fail_marker: str = checked(fields.path, "")
    result: Optional[Dict[str, object]] = checked(fields.mapping, None)
    failure: Optional[Failure] = checked(Failure.from_json, None)
    build_pgid: Optional[int] = checked(fields.pid, None)
    build_leader_start: Optional[str] = checked(fields.text, None)
    locked: bool = checked(fields.boolean, False)  # it took the build lock: its outcome is its request's outcome
    waiting: Optional[Dict[str, object]] = checked(fields.mapping, None)  # the build lease's holder it waits for
    path_env: Optional[str] = checked(fields.text, None)  # the run's PATH, which finds its interpreter by name

    def remaining_eta(self) -> Optional[float]:
        if self.eta_s is None or self.updated is None:
            return None
        # Counted down from the last update, but never to 0 while the run still works.
        return round(max(min(self.eta_s, 1.0), self.eta_s - (time.time() - self.updated)), 1)


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # it names files beside the record


def is_run_id(text: object) -> bool:
    return isinstance(text, str) and _RUN_ID.fullmatch(text) is not None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


_NEW_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def is_new_run_id(text: str) -> bool:
    """Whether ``text`` has the shape ``new_run_id`` gives: a file so named in the tool's folders is its own."""
    return _NEW_RUN_ID.fullmatch(text) is not None


class RunStore:
    """The run records of one root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.base = base_state_dir(os.path.dirname(root))
        self.folder = runs_dir(root)

    def ensure_folder(self) -> None:
        os.makedirs(self.folder, mode=0o755, exist_ok=True)

    def read(self, run_id: str) -> Optional[RunRecord]:
        return RunRecord.from_json(read_json(run_record_file(self.folder, run_id)))

    def write(self, record: RunRecord) -> None:
        """Replace the record whole; flushed to disk only at the run's end (a power cut ends the run too)."""
        atomic_write(run_record_file(self.folder, record.run_id), _record_data(record),
                     durable=record.state != RUNNING)

    def current_id(self) -> Optional[str]:
        raw = read_regular(current_run_file(self.folder), 4096)
        value = raw.decode(errors="replace").strip() if raw is not None else ""
        return value or None

    def set_current(self, run_id: str) -> None:
        atomic_write(current_run_file(self.folder), (run_id + "\n").encode())

    def release(self, run_id: str) -> None:
        """Give the run's reserved room back (before its last writes; idempotent)."""
        remove_quietly([run_reserve_file(self.folder, run_id)])

    def forget(self, run_id: str) -> None:
        """Remove a run that never began (its record, alive file and reserve): nothing may say it runs."""
        remove_quietly([run_record_file(self.folder, run_id), run_alive_file(self.folder, run_id),
                        run_reserve_file(self.folder, run_id)])

    def begin(self, record: RunRecord, alive_fd: Optional[int] = None) -> int:
        """A run's files, all or none (alive file held, reserve, record, ``current``); the fd returned keeps it."""
        run_id = record.run_id
        own = alive_fd is None  # a detached worker's record and alive file are `start`'s
        fd = self.hold_alive(run_id) if alive_fd is None else alive_fd
        os.set_inheritable(fd, False)  # a build we start must not keep the run "alive" after we die
        announced = self.read(run_id)  # `start` wrote it before launching us
        if announced is not None:
            record.started = announced.started
        try:
            atomic_write(run_reserve_file(self.folder, run_id), os.urandom(RESERVE_BYTES))
            atomic_write(run_record_file(self.folder, run_id), _record_data(record))
            self.set_current(run_id)
        except BaseException:
            if own:
                self.forget(run_id)
                os.close(fd)
            else:
                self.release(run_id)
            raise
        return fd

    def current(self) -> Optional[RunRecord]:
        run_id = self.current_id()
        return self.read(run_id) if run_id else None

    def _record_ids(self) -> List[str]:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:  # before the first run
            return []
        return [n[:-len(RUN_RECORD_SUFFIX)] for n in names if n.endswith(RUN_RECORD_SUFFIX)]

    def records(self) -> List[RunRecord]:
        return [r for r in (self.read(n) for n in self._record_ids()) if r]

    def any_alive(self) -> List[RunRecord]:
        return [r for r in self.records() if r.state == RUNNING and self.is_alive(r.run_id)]

    def prune(self) -> None:
        """Keep the newest records (and never the current one's or a live run's); no ended run keeps room, and a
        run killed before its record was written leaves nothing (its alive file and room, once old and free)."""
        names = sorted(self._record_ids())
        keep = set(names[-KEEP_RECORDS:]) | {self.current_id() or ""}
        for run_id in (name for name in names if not self.is_alive(name)):
            (self.release if run_id in keep else self.forget)(run_id)  # a killed run's room, or an old run whole
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.folder):
                run_id, _, suffix = entry.name.rpartition(".")
                if (suffix in ("alive", "reserve") and is_new_run_id(run_id) and run_id not in names
                        and time.time() - entry.stat(follow_symlinks=False).st_mtime > STRAY_AGE_S
                        and not self.is_alive(run_id)):
                    self.forget(run_id)

    def hold_alive(self, run_id: str) -> int:
        """Exclusively flock the run's alive file: the kernel drops the lock however the run dies, so a shared
        flock taken says at once that it is gone (``filelock`` has no shared probe, nor a descriptor to hand on)."""
        self.ensure_folder()
        fd = os.open(run_alive_file(self.folder, run_id), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        os.fchmod(fd, 0o644)  # whatever the umask: another user's `status` opens it to tell that the run lives
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def is_alive(self, run_id: str, *, wait: bool = False) -> bool:
        """Whether the run's alive file is held; ``wait``: block until it is not (the watchdog)."""
        try:
            # Not blocking: a FIFO planted there is flocked, never waited on for a writer.
            fd = os.open(run_alive_file(self.folder, run_id), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if wait else fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


def _record_data(record: RunRecord) -> bytes:
    """A record as written, stamped with the time of writing (its last sign of life)."""
    record.updated = time.time()
    return json_bytes(record.to_json())


def process_start_time(pid: int) -> Optional[str]:
    """The kernel's start time of ``pid`` (clock ticks since boot), to tell a process from a reused pid."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def sibling_roots(root: str) -> List[str]:
    """The other roots of ``root``'s folder that have run records (they share its log, lock and marker)."""
    runs = os.path.dirname(runs_dir(root))
    try:
        names = sorted(os.listdir(runs))
    except OSError:
        return []
    return [os.path.join(os.path.dirname(root), n) for n in names if n != os.path.basename(root)]


def new_record(store: RunStore, run_id: str, *, request: Request, fail_marker: str, log: str,
               kind: str, pid: Optional[int], step: Stage, path_env: Optional[str]) -> RunRecord:
    return RunRecord(run_id=run_id, root=store.root, request=request, kind=kind, pid=pid,
                     pid_start=process_start_time(pid) if pid else None, host=socket.gethostname(), step=step,
                     started=time.time(), log=log, fail_marker=fail_marker, path_env=path_env)
