"""The stop signals (SIGTERM, SIGHUP, SIGINT) blocked around a launch and unblocked by what was launched.  A module
of its own, light to import: the watchdog unblocks them before anything else (runs/watchdog.py)."""

from __future__ import annotations

import contextlib
import signal as _signal
from typing import Iterator, List

STOP_SIGNAL_NAMES = ("SIGTERM", "SIGHUP", "SIGINT")


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Around the launch of a process that unblocks them itself (the mask is inherited through exec)."""
    old = _signal.pthread_sigmask(_signal.SIG_BLOCK, _stop_signals())
    try:
        yield
    finally:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def unblock_stop_signals() -> None:
    """Deliver what arrived while they were blocked (a pending SIGTERM raises here, in the handler's way)."""
    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, _stop_signals())


def _stop_signals() -> "List[int]":
    return [getattr(_signal, name) for name in STOP_SIGNAL_NAMES]
