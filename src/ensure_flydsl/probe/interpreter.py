"""Ask the target interpreter, in a subprocess, what it imports and from where with the tree's folders first on
PYTHONPATH; never in the tool's process (another Python, perhaps, and an import would pin a tree for its life)."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import selectors
import signal
import subprocess
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.probe import scripts
from ensure_flydsl.probe.results import Interpreter, ModuleResult, Probe
from ensure_flydsl.settings import DEFAULT_PROBE_TIMEOUT
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.processes import kill_group, spawn

# The identity probe imports nothing: it never gets longer than this, whatever FLYDSL_PROBE_TIMEOUT says.
IDENTITY_TIMEOUT_S = 60.0
KEPT_BYTES = 1 << 20  # of each of the probe's streams: its answer is a few KB, a failure shows stderr's last lines
T = TypeVar("T")


def joined_pythonpath(prefix: Sequence[str], caller: Optional[str]) -> str:
    return os.pathsep.join([*prefix, *([caller] if caller else [])])


def probe_modules(modules: Sequence[str]) -> List[str]:
    """flydsl is always probed (its __version__ gates reuse), then each required module once."""
    return list(dict.fromkeys(["flydsl", *modules]))


class ProbeBroke(EnsureError):
    """The probe died or hung instead of reporting, while ``importing`` (None: before any) from ``origin``."""

    def __init__(self, reason: str, importing: Optional[str], origin: Optional[str], detail: str = "") -> None:
        super().__init__(
            ExitCode.PROBE, reason, stage=Stage.PROBE, detail=detail,
            hint=f"run `{command('verify')}` by hand to see it; an import that crashes or hangs the interpreter "
            "must be fixed or taken off the path",
        )
        self.importing = importing
        self.origin = origin


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the probe's group and reap it, its pipes closed unread (a process that left the group may hold them)."""
    kill_group(proc.pid)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()


def _collect(proc: subprocess.Popen[bytes], timeout: float) -> Tuple[bytes, bytes, bool]:
    """The last KEPT_BYTES of the probe's stdout and stderr (one printing without end never fills the tool's memory),
    and whether its group was killed after ``timeout`` s (then read 5 s more: one that left the group holds a pipe)."""
    if proc.stdin is not None:  # an early probe, waiting for the word to go on
        with contextlib.suppress(BrokenPipeError):  # it died before reading
            os.write(proc.stdin.fileno(), b"go\n")
        proc.stdin.close()
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    kept = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    deadline, timed_out = time.monotonic() + timeout, False
    with selectors.DefaultSelector() as selector:
        for fd in kept:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and not (timed_out and time.monotonic() >= deadline):
            if time.monotonic() >= deadline:
                kill_group(proc.pid)
                timed_out, deadline = True, time.monotonic() + 5.0
            for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
                data = os.read(key.fd, 1 << 16)
                kept[key.fd] += data
                del kept[key.fd][:-KEPT_BYTES]
                if not data:
                    selector.unregister(key.fd)
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # it closed its output and hangs
        kill_group(proc.pid)
        timed_out = True
        proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return bytes(out), bytes(err), timed_out


def callers_folder() -> Optional[str]:
    """Where the probe runs: the caller's folder (None: inherited; / when gone), so a shim (pyenv's) picks as there."""
    try:
        os.getcwd()
    except OSError:
        return "/"
    return None


def _start(python: str, modules: Sequence[str], env: Mapping[str, str], script: str = "import_probe",
           preload: Optional[Sequence[str]] = None) -> subprocess.Popen[bytes]:
    extra = [] if preload is None else [",".join(preload)]
    try:
        return spawn(
            [python, "-c", scripts.text(script), ",".join(modules), *extra],  # names hold no comma
            env=env, cwd=callers_folder(), stdin=subprocess.DEVNULL if preload is None else subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            own_group=True,  # a group of its own: a timeout kills what the imports started as well
        )
    except OSError as exc:  # a symbolic link loop, a file that is no program: bad input too, never a traceback
        what = {FileNotFoundError: "does not exist", PermissionError: "is not executable"}.get(
            type(exc), f"cannot be run: {exc.strerror}")
        raise EnsureError(ExitCode.BAD_INPUT, f"the interpreter {python!r} {what}", stage=Stage.PROBE,
                          hint="set FLYDSL_PYTHON (or --python) to the interpreter that will import FlyDSL") from None


def _report(python: str, proc: subprocess.Popen[bytes], timeout: float, timeout_label: str,
            read: Callable[[Dict[str, Any]], T]) -> Optional[T]:
    """``read`` of the probe's answer (a Python literal: no code runs); None when an early probe found a preloaded
    module stale; ProbeBroke when it was killed after ``timeout`` seconds or died before it could report."""
    try:
        raw, err, timed_out = _collect(proc, timeout)
    except BaseException:
        _stop_group(proc)  # interrupted: leave no probe behind
        raise
    said: Dict[str, str] = {}  # the last line of each kind on its report channel
    for line in raw.decode(errors="replace").splitlines():
        word, _, rest = line.partition(" ")
        if word == "importing":
            said.pop("origin", None)  # the module reached, then where it was found
        if word in ("importing", "result", "stale"):
            said[word] = rest
        elif word == "origin":
            said[word] = rest.partition(" ")[2]
    if "stale" in said and "result" not in said:
        return None
    with contextlib.suppress(SyntaxError, MemoryError, RecursionError, ValueError, KeyError, TypeError, AttributeError):
        data = ast.literal_eval(said.get("result", ""))  # what a garbled or hostile line raises, or a wrong shape
        if isinstance(data, dict):
            return read(data)
    importing, origin = said.get("importing"), said.get("origin")
    where = f" (from {origin})" if origin else ""
    what = "before importing anything" if importing is None else f"while importing {importing}{where}"
    if timed_out:
        hangs = ("the interpreter hangs before importing anything" if importing is None
                 else f"importing {importing} hangs{where}")
        reason = f"the import probe of {python} was killed after {timeout:g} s ({timeout_label}): {hangs}"
    elif proc.returncode is not None and proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = str(-proc.returncode)
        reason = f"the import probe of {python} failed: the interpreter died with signal {name} {what}"
    else:
        reason = (f"the import probe of {python} failed: the interpreter exited with status {proc.returncode} "
                  f"{what}, before it could report")
    detail = "\n".join(err.decode(errors="replace").strip().splitlines()[-20:])
    raise ProbeBroke(reason, importing, origin, detail)


def probe_environment(prefix: Sequence[str], environ: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """The probe's environment: the tree's folders first on PYTHONPATH, as the env file will put them."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = joined_pythonpath(prefix, env.get("PYTHONPATH"))
    if not env["PYTHONPATH"]:
        del env["PYTHONPATH"]
    # Keep probed trees byte-for-byte as they were: no __pycache__ written into them by us.
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_probe(python: str, *, modules: Sequence[str], prefix: Sequence[str] = (),
              environ: Optional[Mapping[str, str]] = None, timeout: float = DEFAULT_PROBE_TIMEOUT,
              timeout_label: str = "FLYDSL_PROBE_TIMEOUT") -> Probe:
    """What the probe in ``python`` saw; ProbeBroke when it crashes or is killed after ``timeout`` seconds."""
    env, started = probe_environment(prefix, environ), time.monotonic()
    probe = _answer(python, _start(python, modules, env), env.get("PYTHONPATH", ""), started, timeout, timeout_label)
    assert probe is not None  # only an early probe can answer "stale"
    return probe


def _answer(python: str, proc: subprocess.Popen[bytes], pythonpath: str, started: float, timeout: float,
            timeout_label: str) -> Optional[Probe]:
    def read(data: Dict[str, Any]) -> Probe:
        results = tuple(ModuleResult(name, entry.get("file"), entry.get("error"))
                        for name, entry in data["modules"].items())
        return Probe(interpreter=Interpreter.from_json(data["python"]), modules=results, version=data.get("version"),
                     version_error=data.get("version_error"), pythonpath=pythonpath,
                     seconds=time.monotonic() - started)

    return _report(python, proc, timeout, timeout_label, read)


class EarlyProbe:
    """The final probe's interpreter, started early to import ``preload`` (torch) meanwhile; it answers None (use
    a fresh probe) when the arguments differ or the finished tree shadows a module it preloaded."""

    def __init__(self, python: str, *, modules: Sequence[str], prefix: Sequence[str],
                 environ: Mapping[str, str], preload: Sequence[str]) -> None:
        self._env = probe_environment(prefix, environ)
        self._key = (python, tuple(modules), tuple(prefix), dict(environ))
        self._proc: Optional[subprocess.Popen[bytes]] = _start(python, modules, self._env, preload=preload)

    def answer(self, python: str, *, modules: Sequence[str], prefix: Sequence[str], environ: Mapping[str, str],
               timeout: float, timeout_label: str) -> Optional[Probe]:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if self._key != (python, tuple(modules), tuple(prefix), dict(environ)):
            _stop_group(proc)
            return None
        return _answer(python, proc, self._env.get("PYTHONPATH", ""), time.monotonic(), timeout, timeout_label)

    def close(self) -> None:
        """Stop it if it was never asked (the run failed or took another way)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop_group(proc)


def describe_interpreter(python: str, environ: Optional[Mapping[str, str]] = None, *,
                         timeout: float = IDENTITY_TIMEOUT_S,
                         timeout_label: str = "FLYDSL_PROBE_TIMEOUT") -> Interpreter:
    """The interpreter's identity alone (no imports), within the probe timeout, at most IDENTITY_TIMEOUT_S."""
    if timeout > IDENTITY_TIMEOUT_S:
        timeout, timeout_label = IDENTITY_TIMEOUT_S, f"at most {IDENTITY_TIMEOUT_S:g} s to start an interpreter"
    return run_probe(python, modules=(), environ=environ, timeout=timeout, timeout_label=timeout_label).interpreter


def find_modules(python: str, names: Sequence[str], *, environ: Optional[Mapping[str, str]] = None,
                 timeout: float = DEFAULT_PROBE_TIMEOUT,
                 timeout_label: str = "FLYDSL_PROBE_TIMEOUT") -> Dict[str, str]:
    """Each top-level name in ``python``: stdlib, present or missing (found, not imported)."""
    # The tree is not on the path: these are what the tree needs from the interpreter's installs.
    env = probe_environment((), environ)
    found = _report(python, _start(python, names, env, script="find_modules"), timeout, timeout_label,
                    lambda data: {str(name): str(data[name]) for name in names})
    assert found is not None  # only an early probe can answer "stale"
    return found


# Installed packages that import flydsl themselves and refuse one below their floor: the module that does.
FLYDSL_USERS = ("aiter.ops.flydsl",)
_MISSING = re.compile(r"No module named '([^']+)'")


def broken_users(python: str, prefix: Sequence[str], environ: Mapping[str, str],
                 timeout: float) -> List[Dict[str, Optional[str]]]:
    """Each of FLYDSL_USERS that fails to import with the tree first for flydsl's sake: its module, error and floor;
    in a probe of its own, so that a crash of those imports (torch, HIP) cannot fail the tree's verdict."""
    try:
        probe = run_probe(python, modules=FLYDSL_USERS, prefix=prefix, environ=environ, timeout=timeout)
    except ProbeBroke as exc:
        user = exc.importing
        return [] if user not in FLYDSL_USERS else [{"module": user, "error": exc.reason, "floor": None}]
    broken = []
    for m in probe.modules:
        missing = _MISSING.search(m.error or "")
        if not m.error or "flydsl" not in m.error or missing and f"{m.name}.".startswith(f"{missing.group(1)}."):
            continue  # imports, fails for another reason, or is not installed
        floor = re.search(r">=\W*(\d+(?:\.\d+)+)", m.error)
        broken.append({"module": m.name, "error": m.error, "floor": floor.group(1) if floor else None})
    return broken


def broken_user_line(user: Mapping[str, Optional[str]], version: Optional[str]) -> str:
    needs = f" (it needs flydsl >= {user['floor']})" if user.get("floor") else ""
    return (f"warning: {user['module']} fails to import with this tree first (flydsl {version}){needs}: "
            f"{user['error']}; one process loads one flydsl: a process that needs {user['module']} needs its own "
            "PYTHONPATH, without this env file (docs/GEAK.md)")
