"""A long command (a build script) streamed line by line, in a process group of its own that is stopped
when it ends or when the run is interrupted."""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    pass

from ensure_flydsl.support.processes.commands import end_leftovers, stop_group

MAX_LINE_BYTES = 64 * 1024
# When the build script has exited: how long what is left of its group gets after SIGTERM, and how long
# its output is still read (a process that left the group may keep the pipe open for ever).
LEFTOVER_GRACE_S = 2.0
DRAIN_S = 2.0


class _Lines:
    """Splits a byte stream into lines for ``sink``, keeping at most MAX_LINE_BYTES of each."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink = sink
        self.buf = bytearray()
        self.cut = 0

    def feed(self, data: bytes) -> None:
        *whole, rest = data.split(b"\n")
        for piece in whole:
            self._add(piece)
            self._emit()
        self._add(rest)

    def flush(self) -> None:
        if self.buf or self.cut:
            self._emit()

    def _add(self, piece: bytes) -> None:
        room = MAX_LINE_BYTES - len(self.buf)
        self.buf += piece[:room]
        self.cut += max(0, len(piece) - room)

    def _emit(self) -> None:
        line = self.buf.decode(errors="replace").rstrip("\r")
        if self.cut:
            line += f" ... ({self.cut} bytes cut)"
        self.buf, self.cut = bytearray(), 0
        self.sink(line)


def stream_command(
    cmd: Sequence[str],
    *,
    sink: Callable[[str], None],
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    on_start: Callable[[Optional[int]], None] = lambda pgid: None,
) -> int:
    """Run a long command in a process group of its own, handing each output line to ``sink``.

    ``on_start`` learns the group's id (and None once it is gone), so that whoever notices this process
    die can stop the build it leaves behind.  If this process is interrupted (Ctrl-C, SIGTERM turned into
    an exception), the whole group is terminated and reaped before the exception goes on, so no orphaned
    build keeps writing into the tree.  When the command itself exits, what it left running in its group
    is stopped, and the output is read only a little longer: a leftover that holds the pipe open (even
    one that left the group) does not hold the run.
    """

    try:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        sink(f"cannot run {cmd[0]}: {exc.strerror}")
        return 127
    assert proc.stdout is not None
    on_start(proc.pid)
    lines = _Lines(sink)
    try:
        ended = _read_until_exit(proc, lines)
        end_leftovers(proc.pid, LEFTOVER_GRACE_S)  # even those that no longer write: nothing of the build outlives it
        if not ended:
            _drain(proc.stdout.fileno(), lines)
        lines.flush()
        return proc.wait()
    except BaseException:
        stop_group(proc)
        raise
    finally:
        proc.stdout.close()
        on_start(None)


def _read_until_exit(proc: "subprocess.Popen[bytes]", lines: _Lines) -> bool:
    """Hand the output to ``lines`` until the command exits; True when the pipe reached its end too."""

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    while True:
        readable, _, _ = select.select([fd], [], [], 0.2)
        if readable:
            data = os.read(fd, 1 << 16)
            if not data:
                proc.wait()  # every writer closed the pipe; the command itself ends now, or soon
                return True
            lines.feed(data)
        if proc.poll() is not None:
            return False


def _drain(fd: int, lines: _Lines) -> None:
    """Read what is still in the pipe, for at most DRAIN_S seconds or until its end."""

    deadline = time.monotonic() + DRAIN_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return
        data = os.read(fd, 1 << 16)
        if not data:
            return
        lines.feed(data)
