"""Running commands: one helper whose error shows the command, its exit code and its output; streamed
build output with the process group stopped at the end."""

from __future__ import annotations

import contextlib
import os
import shlex
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

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
    build keeps writing into the tree.
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
    try:
        for raw in proc.stdout:
            sink(raw.decode(errors="replace").rstrip("\r\n"))
        return proc.wait()
    except BaseException:
        _stop_group(proc)
        raise
    finally:
        proc.stdout.close()
        on_start(None)


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


def tail_lines(text: str, count: int) -> list[str]:
    return text.splitlines()[-count:]
