"""Steps many scenarios share: wait for a file, check one tree, kill at a fault point, start and status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import IO, Callable, Dict, List, Optional, Tuple

from tests.helpers.workspace import Workspace


def wait_for(path: str, timeout: float = 30.0, containing: str = "") -> None:
    """Until ``path`` exists (and holds ``containing``): what a process still running writes."""
    deadline = time.monotonic() + timeout
    while not (os.path.exists(path) and (not containing or containing in _text(path))):
        assert time.monotonic() < deadline, f"{path} did not appear (holding {containing!r}) within {timeout} s"
        time.sleep(0.02)


def _text(path: str) -> str:
    with open(path, errors="replace") as handle:
        return handle.read()


def assert_one_tree(ws: Workspace, python: str = sys.executable) -> None:
    out = ws.source_and_import(python)
    assert out.returncode == 0, out.stderr
    flydsl_file, kernel_file, _version = out.stdout.splitlines()
    assert flydsl_file == os.path.join(ws.root, "build-fly", "python_packages", "flydsl", "__init__.py")
    assert kernel_file == os.path.join(ws.root, "kernels", "moe_gemm_2stage.py")


def killed_at(ws: Workspace, point: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = dict(ws.env, ENSURE_FLYDSL_FAULT=point, **env)
    return subprocess.run(ws.cmd(*args), env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, timeout=120)


def assert_finished_build_of(ws: Workspace, commit: str) -> None:
    twin = ws.env_twin()
    assert twin["commit"] == commit and twin["how"] == "built"
    assert_one_tree(ws)


def status(ws: Workspace, *args: str, **env: str) -> Dict[str, object]:
    out = ws.run("status", "--json", *args, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data, dict)
    return data


def ensure_json(ws: Workspace, *args: str, cwd: Optional[str] = None, **env: str) -> Dict[str, object]:
    """A successful ``ensure --json`` (in ``cwd``, default the test's): its result, with ``_stderr`` the lines
    the run said (its JSON message events' texts, one per line) and ``_raw`` everything it printed."""
    out = ws.run("--json", *args, cwd=cwd, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data, dict)
    events = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    data["_stderr"] = "\n".join(str(e["text"]) for e in events if e.get("event") == "message")
    data["_raw"] = out.stdout + out.stderr
    return data


def start(ws: Workspace, *args: str, **env: str) -> Dict[str, object]:
    out = ws.run("start", *args, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.splitlines()[-1])
    assert isinstance(data, dict)
    return data


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


class Barrier:
    """A point a fixture script (or git hook) reaches and then holds at until the test lets it go, in place
    of a sleep aimed between two writes: ``hook`` is shell code for FIXTURE_BUILD_HOOK / FIXTURE_LLVM_HOOK
    that touches ``<name>.reached`` and waits for ``<name>.go`` (up to ``hold_s``, so that nothing a failed
    test leaves behind holds for ever)."""

    def __init__(self, folder: str, name: str, hold_s: float = 120.0) -> None:
        os.makedirs(folder, exist_ok=True)
        self.reached = os.path.join(folder, f"{name}.reached")
        self.go = os.path.join(folder, f"{name}.go")
        ticks = int(hold_s / 0.05)
        self.hook = (f'touch "{self.reached}"; n=0; while [ ! -e "{self.go}" ] && [ $n -lt {ticks} ]; '
                     f'do sleep 0.05; n=$((n+1)); done')

    def wait_reached(self, timeout: float = 60.0) -> None:
        wait_for(self.reached, timeout)

    def release(self) -> None:
        open(self.go, "w").close()

    def released(self) -> bool:
        return os.path.exists(self.go)


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` (a read of a record or a log, never a guess at time) until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def run_records(ws: Workspace) -> List[Dict[str, object]]:
    """The run records of the workspace's root as they are now (one being replaced is skipped)."""
    folder = os.path.join(ws.base, ".ensure_flydsl", "runs", os.path.basename(ws.root))
    found = []
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.endswith(".json"):
            try:
                with open(os.path.join(folder, name)) as handle:
                    record = json.load(handle)
            except (OSError, ValueError):
                continue
            if isinstance(record, dict):
                found.append(record)
    return found


def run_record_of(ws: Workspace, pid: int) -> Dict[str, object]:
    """The run record of the run whose process is ``pid``, or {} while there is none."""
    return next((r for r in run_records(ws) if r.get("pid") == pid), {})


def watchdogs_of(run_id: str) -> List[int]:
    """The pids of the watchdog processes (``ensure_flydsl _watchdog ROOT RUN_ID``) of the run ``run_id``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    argv = handle.read().split(b"\0")
            except OSError:
                continue
            if b"_watchdog" in argv and run_id.encode() in argv and alive(int(pid)):
                found.append(int(pid))
    return found


def timed_lines(ws: Workspace, *args: str, into: str = "file", stream: str = "stdout",
                timeout: float = 120.0, **env: str) -> Tuple[int, List[Tuple[float, str]]]:
    """Run the tool with its ``stream`` (stdout or stderr) going ``into`` a file (as GEAK runs it, under nohup
    with its output in a file) or a pipe (a caller that captures it); return the exit code and each line with
    the monotonic time it arrived, read while the run goes on (the other stream goes to a file of its own)."""
    folder = os.path.join(os.path.dirname(ws.base), "timed-output")
    os.makedirs(folder, exist_ok=True)
    other = open(os.path.join(folder, f"other.{time.monotonic_ns()}"), "w")
    lines: List[Tuple[float, str]] = []
    path = os.path.join(folder, f"{stream}.{time.monotonic_ns()}")
    with open(path, "w") as out, other:
        target = subprocess.PIPE if into == "pipe" else out
        streams = {"stdout": target, "stderr": other} if stream == "stdout" else {"stdout": other, "stderr": target}
        proc = subprocess.Popen(ws.cmd(*args), env={**ws.env, **env}, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True, **streams)  # type: ignore[call-overload]
        piped = proc.stdout if stream == "stdout" else proc.stderr
        if piped is not None:
            reader = threading.Thread(target=_read_pipe, args=(piped, lines), daemon=True)
            reader.start()
            proc.wait(timeout=timeout)
            reader.join(timeout=10)
        else:
            _follow_file(path, proc, lines, timeout)
    return proc.returncode, lines


def _read_pipe(pipe: IO[str], lines: List[Tuple[float, str]]) -> None:
    for line in pipe:
        lines.append((time.monotonic(), line.rstrip("\n")))


def _follow_file(path: str, proc: "subprocess.Popen[str]", lines: List[Tuple[float, str]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with open(path) as handle:
        partial = ""
        while True:
            ended = proc.poll() is not None
            partial += handle.read()
            *whole, partial = partial.split("\n")
            now = time.monotonic()
            lines.extend((now, line) for line in whole)
            if ended:
                return
            assert now < deadline, f"still running after {timeout} s"
            time.sleep(0.02)


def gaps(lines: List[Tuple[float, str]]) -> List[float]:
    """The seconds between each line and the next."""
    return [b[0] - a[0] for a, b in zip(lines, lines[1:])]
