"""Short commands: one helper whose error shows the command, its exit code and its output; a process
group stopped; the stop signals blocked around a launch."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from typing import IO, TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:

    Stream = Union[int, IO[Any], None]  # what a child's stdin, stdout or stderr is: a file, a pipe, DEVNULL


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


def run_captured(
    cmd: Sequence[str],
    *,
    stdout: Stream,
    stderr: Stream,
    stdin: Stream = None,
    input: Optional[bytes] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> "subprocess.CompletedProcess[bytes]":
    """Run a short command to its end (``subprocess.run``, never ``check``): the caller reads its code and
    output itself.  OSError when it cannot start; ``subprocess.TimeoutExpired`` past ``timeout`` (the command
    killed first)."""

    return subprocess.run(list(cmd), stdin=stdin, input=input, stdout=stdout, stderr=stderr,
                          env=None if env is None else dict(env), timeout=timeout, check=False)


def spawn(
    cmd: Sequence[str],
    *,
    stdin: Stream,
    stdout: Stream,
    stderr: Stream,
    own_group: bool,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    pass_fds: Sequence[int] = (),
) -> "subprocess.Popen[bytes]":
    """Start a process that runs beside this one (a probe, a compile, a worker, a watchdog).  ``own_group``:
    in a process group of its own, so that stopping it (:func:`kill_group`) stops what it started too, and a
    signal to this tool's group does not reach it."""

    return subprocess.Popen(list(cmd), stdin=stdin, stdout=stdout, stderr=stderr,
                            env=None if env is None else dict(env), cwd=cwd, start_new_session=own_group,
                            pass_fds=tuple(pass_fds))


def spawn_text(cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None) -> "subprocess.Popen[str]":
    """Start a process whose output is read as text lines, stdout and stderr together (pip's download),
    in this tool's process group: a Ctrl-C or a kill of the group stops it too."""

    return subprocess.Popen(list(cmd), env=None if env is None else dict(env), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")


def kill_group(pgid: int) -> None:
    """SIGKILL the process group ``pgid``; one that is already gone (or no longer ours) is left alone."""

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_and_reap(proc: "subprocess.Popen[bytes]") -> None:
    """SIGKILL the group ``proc`` leads and wait for ``proc`` itself."""
    kill_group(proc.pid)
    proc.wait()


def stop_group(proc: "subprocess.Popen[bytes]", grace_s: float = 10.0) -> None:
    """SIGTERM the group, give it ``grace_s``, then SIGKILL whatever of it is left (the leader may go first)."""

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_and_reap(proc)


def end_leftovers(pgid: int, grace_s: float) -> None:
    """SIGTERM what is left of an exited command's process group, then SIGKILL it after ``grace_s``."""

    deadline = time.monotonic() + grace_s
    try:
        os.killpg(pgid, signal.SIGTERM)
        while time.monotonic() < deadline:
            time.sleep(0.05)
            os.killpg(pgid, 0)
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone (or was never more than the command)


def tail_lines(text: str, count: int) -> list[str]:
    return text.splitlines()[-count:]
