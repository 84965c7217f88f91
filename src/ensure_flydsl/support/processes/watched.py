"""Network commands (git ls-remote, fetch, submodule update): a silence watchdog that stops their process
group, and the heartbeat said while they wait."""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

if TYPE_CHECKING:
    pass

from ensure_flydsl.support.processes.commands import CommandFailed, kill_and_reap, kill_group

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
                kill_and_reap(proc)
                text = _collapse(b"".join(chunks))
                raise Silent(cmd, text, remote(text), limit)
            if now - last_beat >= beat:
                last_beat = now
                heartbeat(waiting_line(what, remote(_collapse(b"".join(chunks))), now - started,
                                       now - last_data, limit))
        returncode = proc.wait()
    except BaseException:
        kill_and_reap(proc)
        raise
    finally:
        proc.stdout.close()
    kill_group(proc.pid)  # git's helpers end with it; anything of the group still there now is stopped
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
