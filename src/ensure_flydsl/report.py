"""Messages for people and agents, and the run's log.

Decisions and step lines go to the chosen stream (stdout, or stderr under ``--json``) with a time stamp,
and to the log once a provisioning run opens it.  A build's own output goes only to the log; the last
lines are kept in memory so a failure can show them with the log's path.  When the caller already
redirected our stdout into the log (the seed's ``nohup ... > ensure_flydsl.log`` recipe), the log is not
opened a second time, so nothing is written twice.
"""

from __future__ import annotations

import collections
import os
import time
from typing import IO, Deque, List, Optional

LOG_ROTATE_BYTES = 64 * 1024**2
TAIL_LINES = 40


class Reporter:
    def __init__(self, stream: Optional[IO[str]], *, prefix: str = "ensure-flydsl") -> None:
        self.stream = stream
        self.prefix = prefix
        self.log_path: Optional[str] = None
        self._log: Optional[IO[str]] = None
        self._log_is_stream = False
        self._tail: Deque[str] = collections.deque(maxlen=TAIL_LINES)

    # -- messages ----------------------------------------------------------------------------------------
    def say(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {self.prefix}: {message}"
        if self.stream is not None:
            self.stream.write(line + "\n")
            self.stream.flush()
        if self._log is not None and not self._log_is_stream:
            self._write_log(line)

    def build_line(self, line: str) -> None:
        """One line of a build command's output: the log, and the in-memory tail."""
        self._tail.append(line)
        if self._log is not None:
            self._write_log(line)

    def tail(self, count: int = 20) -> List[str]:
        return list(self._tail)[-count:]

    # -- the log -----------------------------------------------------------------------------------------
    def open_log(self, path: str) -> None:
        if self._log is not None or self.log_path == path:
            return
        self.log_path = path
        if self.stream is not None and _same_file(self.stream, path):
            self._log, self._log_is_stream = self.stream, True  # our stream already is the log
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            if os.path.getsize(path) > LOG_ROTATE_BYTES:
                os.replace(path, path + ".1")
        except OSError:
            pass
        self._log = open(path, "a", encoding="utf-8", errors="replace")
        os.chmod(path, 0o644)
        self._write_log(f"==== ensure-flydsl run, pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S %z')}")

    def _write_log(self, line: str) -> None:
        assert self._log is not None
        self._log.write(line + "\n")
        self._log.flush()

    def close(self) -> None:
        if self._log is not None and not self._log_is_stream:
            self._log.close()
        self._log = None


def _same_file(stream: IO[str], path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(stream.fileno()), os.stat(path))
    except (OSError, ValueError, AttributeError):
        return False
