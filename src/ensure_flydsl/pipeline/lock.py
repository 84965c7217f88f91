"""The build lock: one provisioning run per root per host.  An flock dies with its process (no stale lock); the
file is never deleted (a new caller would lock a fresh inode while a waiter holds the old one: two builds at once).
``<lock>.holder`` beside it says who holds it, for whoever waits."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import asdict, dataclass
from typing import Callable, Iterator, Optional

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.runs.markers import now_iso
from ensure_flydsl.support import fields, space
from ensure_flydsl.support.fields import Record, checked
from ensure_flydsl.support.files import (
    LockBusy,
    atomic_write_json,
    file_path_problem,
    held_lock,
    read_json,
    remove_file,
)
from ensure_flydsl.support.launcher import command


@dataclass(frozen=True)
class LockHolder(Record):
    """``<lock>.holder``: who holds the build lock, for whoever waits for it; a field other than the pid that is
    not short printable text reads as unknown."""

    pid: int = checked(fields.pid)
    host: str = checked(fields.short_text, "?", lenient=True)
    started: str = checked(fields.short_text, "?", lenient=True)  # ISO 8601, UTC
    started_ts: float = checked(fields.seconds, 0.0, lenient=True)
    run_id: str = checked(fields.short_text, "", lenient=True)


def describe_holder(holder: Optional[LockHolder]) -> str:
    if holder is None:
        return "a process that did not record itself (an older tool or another program)"
    return f"pid {holder.pid} on host {holder.host} since {holder.started}" + (
        f" (run {holder.run_id})" if holder.run_id else "")


@contextlib.contextmanager
def build_lock(path: str, *, timeout: Optional[float], run_id: str, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the build lock for the body, waiting at most ``timeout`` s; running out names the holder."""
    problem = file_path_problem(path, symlink_ok=False)  # a symlink could redirect it to somebody's file
    if problem:
        raise EnsureError(ExitCode.BAD_INPUT, f"FLYDSL_BUILD_LOCK={path!r} is not allowed: {problem}", stage=Stage.LOCK)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    holder_file = path + ".holder"
    try:
        with held_lock(path, timeout=timeout, say=say, what="the build lock",
                       holder=lambda: describe_holder(LockHolder.from_json(read_json(holder_file)))):
            holder = LockHolder(pid=os.getpid(), host=socket.gethostname(), started=now_iso(), started_ts=time.time(),
                                run_id=run_id)
            try:
                atomic_write_json(holder_file, asdict(holder))
            except OSError as exc:
                if not space.is_full(exc):
                    raise
                # On a full disk the lock is held without it (`clean` must run there), and no stale record stays.
                remove_file(holder_file)
            try:
                yield
            finally:
                remove_file(holder_file)
    except LockBusy as exc:
        raise EnsureError(ExitCode.LOCK, str(exc), stage=Stage.LOCK,
                          hint=f"another ensure-flydsl run is provisioning this root; `{command('wait')}` follows it, "
                          "or raise FLYDSL_LOCK_TIMEOUT") from None
