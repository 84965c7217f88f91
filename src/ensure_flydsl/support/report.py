"""Messages for people and agents (a terminal's live line, time-stamped lines, or ``--json`` events), and the
run's log, which gets every message and the build's own output (its last lines kept for a failure's message)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import threading
import time
from typing import IO, Deque, Dict, List, Optional

from ensure_flydsl.support import space
from ensure_flydsl.support.files import rename_into_place

LOG_ROTATE_BYTES = 64 * 1024**2
TAIL_LINES = 40
JSON_PROGRESS_INTERVAL_S = 1.0


def known(value: object, unknown: str = "unknown") -> str:
    """``value`` for a person to read: never the word None."""
    return unknown if value is None or value == "" else str(value)


def printable(text: str) -> str:
    """``text`` with what a terminal would act on (escape sequences, newlines) shown escaped: read, not obeyed."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def fmt_seconds(seconds: Optional[float]) -> str:
    if seconds is None:
        return "unknown"
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


class Reporter:
    def __init__(self, stream: Optional[IO[str]], *, mode: str = "plain", verbosity: int = 0) -> None:
        self.stream = stream
        self.mode = mode  # "tty", "plain" or "json"
        self.verbosity = verbosity  # -1 (-q): failures only (the log gets every line); 1 (-v): the build's output
        self.log_path: Optional[str] = None
        self._log: Optional[IO[str]] = None
        self._log_is_stream = False  # our stream already is the log (nohup ... > ensure_flydsl.log, a worker)
        self._tail: Deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._live = False
        self._last_decile = -1
        self._last_json_progress = 0.0
        self.last_shown = time.monotonic()  # when the stream was last written to (the heartbeat's clock)
        self._lock = threading.RLock()  # the heartbeat's thread writes too: lines never interleave

    @classmethod
    def for_stream(cls, stream: IO[str], *, json_events: bool = False, verbosity: int = 0) -> "Reporter":
        """A reporter for ``stream``: a live line redrawn in place (``\\r``, ``ESC [K``) on a terminal not dumb."""
        try:
            tty = stream.isatty() and os.environ.get("TERM", "") != "dumb"
        except (AttributeError, ValueError):
            tty = False
        return cls(stream, mode="json" if json_events else "tty" if tty else "plain", verbosity=verbosity)

    # -- messages ----------------------------------------------------------------------------------------
    def say(self, message: str, event: Optional[Dict[str, object]] = None) -> None:
        """A message (``event``: its ``--json`` form, if not a message event), and to the log."""
        line = f"[{time.strftime('%H:%M:%S')}] ensure-flydsl: {message}"
        if self.verbosity >= 0 and self.mode == "json":
            self.event(event or {"event": "message", "text": message})
        elif self.verbosity >= 0:
            self._print(line)
        if not (self.verbosity >= 0 and self._log_is_stream):  # shown on a stream that is the log: written there once
            self._write_log(line)

    def event(self, event: Dict[str, object]) -> None:
        """One JSON event as given, with its time (``--json`` mode; the other modes show nothing)."""
        if self.mode == "json":
            self._write(json.dumps({"time": time.time(), **event}, sort_keys=True) + "\n")

    def step(self, name: str, state: str, seconds: Optional[float] = None) -> None:
        self._last_decile = -1
        timed = {} if seconds is None else {"seconds": round(seconds, 3)}
        self.event({"event": "step", "step": name, "state": state, **timed})

    def progress(self, step: str, percent: Optional[float], eta: Optional[float]) -> None:
        if percent is None or self.verbosity < 0:
            return
        if self.mode == "tty" and self.stream is not None:
            self._live = self._write(f"\r\x1b[K  {step} {percent:5.1f}%  ETA {fmt_seconds(eta)}")
        elif self.mode == "plain":
            decile = int(percent // 10)
            if decile != self._last_decile:
                self._last_decile = decile
                self.say(f"{step} {percent:.0f}% (ETA {fmt_seconds(eta)})")
        elif self.mode == "json":
            now = time.time()
            if now - self._last_json_progress >= JSON_PROGRESS_INTERVAL_S or percent >= 100:
                self._last_json_progress = now
                self.event({"event": "progress", "step": step, "percent": round(percent, 1),
                            "eta_s": None if eta is None else round(eta, 1)})

    def build_line(self, line: str) -> None:
        """One line of a build command's output: the log, and the in-memory tail."""
        self._tail.append(line)
        shown = self.verbosity > 0 and self.mode != "json"
        if not (shown and self._log_is_stream):  # shown on a stream that is the log: written there once
            self._write_log(line)
        if shown:
            self._print("    " + line)

    def tail(self, count: int = 20) -> List[str]:
        return list(self._tail)[-count:] if count > 0 else []

    def _print(self, line: str) -> None:
        with self._lock:
            if self._live:
                self._live = False
                line = "\r\x1b[K" + line
            self._write(line + "\n")

    def _write(self, text: str) -> bool:
        """Show ``text``; False if there is nowhere to.  A reader gone (``| head -1``) or a full disk under the
        stream ends the messages, never the run: the log still gets every line."""
        with self._lock:
            self.last_shown = time.monotonic()  # nowhere to show it: the heartbeat still waits an interval
            if self.stream is None:
                return False
            try:
                self.stream.write(text)
                self.stream.flush()
            except OSError as exc:
                if not isinstance(exc, BrokenPipeError) and not space.is_full(exc):
                    raise
                to_devnull(self.stream)
                self.stream = None
                return False
            return True

    # -- the log -----------------------------------------------------------------------------------------
    def open_log(self, path: str) -> None:
        if self._log is not None or self.log_path == path:
            return
        self.log_path = path
        if self.stream is not None and _same_file(self.stream, path):
            self._log, self._log_is_stream = self.stream, True
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with contextlib.suppress(OSError):
                if os.path.getsize(path) > LOG_ROTATE_BYTES:
                    rename_into_place(path, path + ".1")
            # O_NOFOLLOW: a symlink planted at the log's path must not make us append to (or chmod) its target.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            os.fchmod(fd, 0o644)
            self._log = os.fdopen(fd, "a", encoding="utf-8", errors="replace")
        self._write_log(f"==== ensure-flydsl run, pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S %z')}")

    def _write_log(self, line: str) -> None:
        with self._lock:
            if self._log is None:
                return
            try:
                self._log.write(line + "\n")
                self._log.flush()
                if self._log_is_stream:
                    self.last_shown = time.monotonic()
            except OSError:  # a full disk: the run goes on without its log
                log, self._log = self._log, None
                if not self._log_is_stream:
                    with contextlib.suppress(OSError):
                        log.close()

    def close(self) -> None:
        if self._live and self.stream is not None:
            with contextlib.suppress(OSError):
                self.stream.write("\r\x1b[K")
            self._live = False
        if self._log is not None and not self._log_is_stream:
            with contextlib.suppress(OSError):
                self._log.close()
        self._log = None


def to_devnull(stream: IO[str]) -> None:
    """Point a stream whose reader went away at /dev/null: what it still buffers is dropped quietly."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()


def _same_file(stream: IO[str], path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(path))
    except (OSError, ValueError, AttributeError):
        return False
