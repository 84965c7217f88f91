"""Running commands: one helper whose error shows the command, its exit code and its output; streamed
build output with the process group stopped at the end."""

from __future__ import annotations

import contextlib
import os
import shlex
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence

if TYPE_CHECKING:
    import subprocess


class CommandFailed(Exception):
    """A command exited non-zero (or could not start); the message shows the command, its code and output."""

    def __init__(self, cmd: Sequence[str], returncode: int, output: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.output = output
        super().__init__(self.describe())

    def describe(self) -> str:
        lines = [f"command: {shlex.join(self.cmd)}", f"return code: {self.returncode}"]
        text = self.output.rstrip()
        if text:
            lines.append("output:")
            lines.extend("    " + line for line in text.splitlines())
        else:
            lines.append("output: (none)")
        return "\n".join(lines)


def cmd_output(
    cmd: Sequence[str],
    *,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
    check: bool = True,
) -> str:
    """Run a short command and return its stdout+stderr; raise CommandFailed on a non-zero exit."""
    import subprocess

    try:
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CommandFailed(cmd, 127, f"cannot run {cmd[0]}: {exc.strerror}") from None
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else ""
        raise CommandFailed(cmd, -1, out + f"\n(timed out after {timeout} s)") from None
    out = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, out)
    return out


# A build line longer than this is cut (its start is kept, with a note): a megabyte-long line without a
# newline would otherwise be held whole, several times over, in memory.
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
    import subprocess

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
        _stop_leftovers(proc.pid)  # even those that no longer write: nothing of the build outlives it
        if not ended:
            _drain(proc.stdout.fileno(), lines)
        lines.flush()
        return proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        proc.stdout.close()
        on_start(None)


def _read_until_exit(proc: "subprocess.Popen[bytes]", lines: _Lines) -> bool:
    """Hand the output to ``lines`` until the command exits; True when the pipe reached its end too."""
    import select

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


def _stop_leftovers(pgid: int) -> None:
    """SIGTERM what is left of the exited command's process group, then SIGKILL it after a short grace."""
    import signal
    import time

    deadline = time.monotonic() + LEFTOVER_GRACE_S
    try:
        os.killpg(pgid, signal.SIGTERM)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            os.killpg(pgid, 0)
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone (or was never more than the command)


def _drain(fd: int, lines: _Lines) -> None:
    """Read what is still in the pipe, for at most DRAIN_S seconds or until its end."""
    import select
    import time

    deadline = time.monotonic() + DRAIN_S
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return
        data = os.read(fd, 1 << 16)
        if not data:
            return
        lines.feed(data)


def _stop_group(proc: "subprocess.Popen[bytes]") -> None:
    """SIGTERM the group, give it 10 s, then SIGKILL whatever of it is left (the leader may go first)."""
    import signal
    import subprocess

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid``; one that is already gone (or no longer ours) is left alone."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def tail_lines(text: str, count: int) -> list[str]:
    return text.splitlines()[-count:]


# ---------------------------------------------------------------------------------------------------------
# Network commands: a silence watchdog
# ---------------------------------------------------------------------------------------------------------

# A network step that receives nothing for this long is stopped (the README's 60 s); while it waits, a line
# is said every half of it (30 s), so that a caller's own silence detector never takes the run for hung.
# ENSURE_FLYDSL_NETWORK_SILENCE_S shortens it for the tests (internal; not a setting).
NETWORK_SILENCE_S = 60.0
_SILENCE_VARIABLE = "ENSURE_FLYDSL_NETWORK_SILENCE_S"


def _nowhere(message: str) -> None:
    pass


_heartbeat: Callable[[str], None] = _nowhere


def network_silence_s(environ: Optional[Mapping[str, str]] = None) -> float:
    """Seconds of silence after which a network step is stopped."""
    text = (os.environ if environ is None else environ).get(_SILENCE_VARIABLE, "")
    try:
        value = float(text)
    except ValueError:
        return NETWORK_SILENCE_S
    return value if value > 0 else NETWORK_SILENCE_S


# A detached worker is launched with these blocked and unblocks them once its run record can say how it ended:
# a SIGTERM in its first tenth of a second (before Python installed its handlers) used to kill it outright,
# reported as "died: kill -9 / OOM" (exit 9) instead of 130 naming the signal.
STOP_SIGNAL_NAMES = ("SIGTERM", "SIGHUP", "SIGINT")


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Around the launch of a process that unblocks them itself (the mask is inherited through exec)."""
    import signal

    old = signal.pthread_sigmask(signal.SIG_BLOCK, [getattr(signal, name) for name in STOP_SIGNAL_NAMES])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock_stop_signals() -> None:
    """Deliver what arrived while they were blocked (a pending SIGTERM raises here, in the handler's way)."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, [getattr(signal, name) for name in STOP_SIGNAL_NAMES])


def set_heartbeat(say: Callable[[str], None]) -> None:
    """Where the lines said while a network step waits go (the run's reporter; nowhere by default)."""
    global _heartbeat
    _heartbeat = say


def heartbeat(message: str) -> None:
    _heartbeat(message)


class Silent(CommandFailed):
    """A network command received nothing for ``seconds`` and was stopped (its whole process group)."""

    def __init__(self, cmd: Sequence[str], output: str, remote: str, seconds: float) -> None:
        self.remote = remote
        self.seconds = seconds
        text = output.strip("\n") + "\n" if output.strip() else ""
        super().__init__(cmd, -9, text + f"(stopped: nothing received from {remote} for {seconds:g} s)")


def waiting_line(what: str, remote: str, elapsed: float, silent: float, limit: float) -> str:
    return (f"{what}: still waiting for {remote} ({elapsed:.0f} s so far, {silent:.0f} s without data; "
            f"stopped after {limit:g} s without data)")


def watched_output(
    cmd: Sequence[str],
    *,
    remote: Callable[[str], str],
    what: str,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    silence_s: Optional[float] = None,
    check: bool = True,
) -> str:
    """Run a network command (git ls-remote, fetch, submodule update) in a process group of its own and
    return its stdout+stderr, progress redraws collapsed.  Any byte of output counts as data (git's
    ``--progress`` prints as objects arrive); when nothing comes for ``silence_s`` seconds (default
    :func:`network_silence_s`) the group is killed and :class:`Silent` raised, naming ``remote(output)``
    (the remote it was talking to, from what it printed).  Every half of that limit a line goes to the
    heartbeat.  Interrupted (Ctrl-C, SIGTERM), the group is stopped before the exception goes on."""
    import select
    import subprocess
    import time

    limit = network_silence_s(env) if silence_s is None else silence_s
    beat = min(30.0, limit / 2)
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=None if env is None else dict(env),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as exc:
        raise CommandFailed(cmd, 127, f"cannot run {cmd[0]}: {exc.strerror}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    chunks: list[bytes] = []
    started = last_data = last_beat = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            if select.select([fd], [], [], min(0.25, max(0.0, last_data + limit - now)))[0]:
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                chunks.append(data)
                last_data = time.monotonic()
                continue
            now = time.monotonic()
            if now - last_data >= limit:
                _kill_and_reap(proc)
                text = _collapse(b"".join(chunks))
                raise Silent(cmd, text, remote(text), limit)
            if now - last_beat >= beat:
                last_beat = now
                heartbeat(waiting_line(what, remote(_collapse(b"".join(chunks))), now - started,
                                       now - last_data, limit))
        returncode = proc.wait()
    except BaseException:
        _kill_and_reap(proc)
        raise
    finally:
        proc.stdout.close()
    _stop_leftovers_quietly(proc.pid)
    out = _collapse(b"".join(chunks))
    if check and returncode != 0:
        raise CommandFailed(cmd, returncode, out)
    return out


def _collapse(data: bytes) -> str:
    """Output with progress redraws (``\\r``) reduced to their last state, one line each."""
    lines = []
    for line in data.decode(errors="replace").split("\n"):
        parts = [p for p in line.split("\r") if p.strip()]
        lines.append(parts[-1] if parts else "")
    return "\n".join(lines)


def _kill_and_reap(proc: "subprocess.Popen[bytes]") -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _stop_leftovers_quietly(pgid: int) -> None:
    """git's helpers end with it; anything of the group still there now is stopped."""
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
