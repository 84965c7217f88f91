"""Every process the tool starts is started and stopped here: short commands (failing with their command, code
and output), a build script streamed line by line, network commands under a silence watchdog."""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import signal
import subprocess
import time
from typing import IO, Any, Callable, Iterator, Mapping, Optional, Sequence, Union

Stream = Union[int, IO[Any], None]  # a child's stdin, stdout or stderr: a file, a pipe, DEVNULL

# A network step that receives nothing for this long is stopped (the README's 60 s).  A line is said every
# half of it, so a caller's own silence detector never takes the run for hung.  The tests shorten it.
NETWORK_SILENCE_S = 60.0
SILENCE_VARIABLE = "ENSURE_FLYDSL_NETWORK_SILENCE_S"
# A build line longer than this is cut: a megabyte-long line without a newline would be held whole.
MAX_LINE_BYTES = 64 * 1024
# Once the build script exited, what is left of its group gets LEFTOVER_GRACE_S after SIGTERM.  Its output is
# read DRAIN_S longer: a process that left the group may hold the pipe open for ever.
LEFTOVER_GRACE_S = 2.0
DRAIN_S = 2.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class CommandFailed(Exception):
    """A command exited non-zero (or could not start); the message shows the command, its code and output."""

    def __init__(self, cmd: Sequence[str], returncode: int, output: str) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.output = output
        super().__init__(self.describe())

    def describe(self) -> str:
        text = self.output.rstrip()
        shown = "".join("\n    " + line for line in text.splitlines()) if text else " (none)"
        return f"command: {shlex.join(self.cmd)}\nreturn code: {self.returncode}\noutput:{shown}"


def cmd_output(cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None) -> str:
    """Run a short command and return its stdout+stderr; raise CommandFailed on a non-zero exit."""
    try:
        proc = subprocess.run(list(cmd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        raise CommandFailed(cmd, 127, f"cannot run {cmd[0]}: {exc.strerror}") from None
    except subprocess.TimeoutExpired as exc:
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else ""
        raise CommandFailed(cmd, -1, out + f"\n(timed out after {timeout} s)") from None
    out = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise CommandFailed(cmd, proc.returncode, out)
    return out


def run_captured(cmd: Sequence[str], *, stdout: Stream, stderr: Stream, stdin: Stream = None,
                 input: Optional[bytes] = None, env: Optional[Mapping[str, str]] = None,
                 timeout: Optional[float] = None) -> "subprocess.CompletedProcess[bytes]":
    """``subprocess.run`` without ``check``: OSError when it cannot start, TimeoutExpired past ``timeout``."""
    return subprocess.run(list(cmd), stdin=stdin, input=input, stdout=stdout, stderr=stderr, env=env,
                          timeout=timeout, check=False)


def spawn(cmd: Sequence[str], *, stdin: Stream, stdout: Stream, stderr: Stream, own_group: bool,
          env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
          pass_fds: Sequence[int] = ()) -> "subprocess.Popen[bytes]":
    """Start a process beside this one; ``own_group``: in a group of its own (stopping it stops what it started,
    and a signal to this tool's group does not reach it)."""
    return subprocess.Popen(list(cmd), stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                            start_new_session=own_group, pass_fds=tuple(pass_fds))


def spawn_text(cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None) -> "subprocess.Popen[str]":
    """A process whose stdout and stderr are read as text lines, in this tool's group (a Ctrl-C stops it too)."""
    return subprocess.Popen(list(cmd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid``; one that is already gone (or no longer ours) is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_and_reap(proc: "subprocess.Popen[bytes]") -> None:
    kill_group(proc.pid)
    proc.wait()


def end_leftovers(pgid: int, grace_s: float) -> None:
    """SIGTERM what is left of an exited command's process group, then SIGKILL it after ``grace_s``."""
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, signal.SIGTERM)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            os.killpg(pgid, 0)
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Around the launch of a process that unblocks them itself: a detached worker SIGTERMed before Python
    installed its handlers would die as "kill -9" (exit 9), not 130."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock_stop_signals() -> None:
    """Deliver what arrived while they were blocked (a pending SIGTERM raises here, in the handler's way)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


# -- a build script, streamed ---------------------------------------------------------------------------------
class _Lines:
    """Splits a byte stream into lines for ``sink``, keeping at most MAX_LINE_BYTES of each."""

    def __init__(self, sink: Callable[[str], None]) -> None:
        self.sink, self.buf, self.cut = sink, bytearray(), 0

    def feed(self, data: bytes) -> None:
        *whole, rest = data.split(b"\n")
        for piece in whole:
            self._add(piece)
            self.flush(ended=True)
        self._add(rest)

    def flush(self, ended: bool = False) -> None:
        """Say the line so far: one that ``ended`` (at a line break) even when empty."""
        if ended or self.buf or self.cut:
            line = self.buf.decode(errors="replace").rstrip("\r")
            self.sink(line + (f" ... ({self.cut} bytes cut)" if self.cut else ""))
            self.buf, self.cut = bytearray(), 0

    def _add(self, piece: bytes) -> None:
        room = MAX_LINE_BYTES - len(self.buf)
        self.buf += piece[:room]
        self.cut += max(0, len(piece) - room)


def stream_command(cmd: Sequence[str], *, sink: Callable[[str], None], cwd: Optional[str] = None,
                   env: Optional[Mapping[str, str]] = None,
                   on_start: Callable[[Optional[int]], None] = lambda pgid: None) -> int:
    """Run a long command in a group of its own, each output line to ``sink``; ``on_start`` learns the group's id
    (None once gone).  Interrupted, the group is stopped; exited, its leftovers too, and its pipe read DRAIN_S more."""
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        sink(f"cannot run {cmd[0]}: {exc.strerror}")
        return 127
    assert proc.stdout is not None
    on_start(proc.pid)
    fd, lines, drain_until = proc.stdout.fileno(), _Lines(sink), None
    try:
        while True:
            wait = 0.2 if drain_until is None else drain_until - time.monotonic()
            if wait > 0 and select.select([fd], [], [], wait)[0]:
                data = os.read(fd, 1 << 16)
                if not data:
                    break  # every writer closed the pipe
                lines.feed(data)
            elif drain_until is not None:
                break  # read for DRAIN_S after the command exited
            if drain_until is None and proc.poll() is not None:
                end_leftovers(proc.pid, LEFTOVER_GRACE_S)  # those that no longer write too: nothing outlives it
                drain_until = time.monotonic() + DRAIN_S
        if drain_until is None:  # the pipe ended first: the command itself ends now, or soon
            proc.wait()
            end_leftovers(proc.pid, LEFTOVER_GRACE_S)
        lines.flush()
        return proc.wait()
    except BaseException:  # the group gets 10 s after SIGTERM, then SIGKILL
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10.0)
        kill_and_reap(proc)
        raise
    finally:
        proc.stdout.close()
        on_start(None)


# -- network commands, under a silence watchdog -----------------------------------------------------------
def network_silence_s(environ: Optional[Mapping[str, str]] = None) -> float:
    try:
        value = float((os.environ if environ is None else environ).get(SILENCE_VARIABLE, ""))
    except ValueError:
        return NETWORK_SILENCE_S
    return value if value > 0 else NETWORK_SILENCE_S


_heartbeat: Optional[Callable[[str], None]] = None


def set_heartbeat(say: Callable[[str], None]) -> None:
    """Where the lines said while a network step waits go (the run's reporter; nowhere by default)."""
    global _heartbeat
    _heartbeat = say


def heartbeat(message: str) -> None:
    if _heartbeat is not None:
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


def watched_output(cmd: Sequence[str], *, remote: Callable[[str], str], what: str,
                   env: Optional[Mapping[str, str]] = None, silence_s: Optional[float] = None) -> str:
    """Run a network command in a group of its own; its output, redraws collapsed.  After ``silence_s`` without a
    byte the group is killed (Silent names ``remote(output)``); every half of that a line goes to the heartbeat."""
    limit = network_silence_s(env) if silence_s is None else silence_s
    beat = min(30.0, limit / 2)
    try:
        proc = subprocess.Popen(list(cmd), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise CommandFailed(cmd, 127, f"cannot run {cmd[0]}: {exc.strerror}") from None
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    output = bytearray()
    started = last_data = last_beat = time.monotonic()
    try:
        while True:
            if select.select([fd], [], [], min(0.25, max(0.0, last_data + limit - time.monotonic())))[0]:
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                output += data
                last_data = time.monotonic()
                continue
            now = time.monotonic()
            if now - last_data >= limit:  # the group is killed below, as on any exception
                text = _collapse(output)
                raise Silent(cmd, text, remote(text), limit)
            if now - last_beat >= beat:
                last_beat = now
                heartbeat(waiting_line(what, remote(_collapse(output)), now - started, now - last_data, limit))
        returncode = proc.wait()
    except BaseException:
        kill_and_reap(proc)
        raise
    finally:
        proc.stdout.close()
    kill_group(proc.pid)  # git's helpers end with it; anything of the group still there now is stopped
    out = _collapse(output)
    if returncode != 0:
        raise CommandFailed(cmd, returncode, out)
    return out


def _collapse(data: bytearray) -> str:
    """Output with progress redraws (``\\r``) reduced to their last state, one line each."""
    lines = []
    for line in data.decode(errors="replace").split("\n"):
        parts = [p for p in line.split("\r") if p.strip()]
        lines.append(parts[-1] if parts else "")
    return "\n".join(lines)
