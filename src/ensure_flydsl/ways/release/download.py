"""The release wheel's download: ``pip download`` of ``flydsl==X`` for the target's tags, through the target's pip
(else the tool's), stopped when the index sends nothing for the network silence limit."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from packaging.tags import platform_tags

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.probe.interpreter import find_modules
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.support import processes, space
from ensure_flydsl.support.files import folder_bytes
from ensure_flydsl.ways.package_index import pip_env

_RETRY = "Retrying ("  # pip's retry after a stalled connection: no sign that the index answers
_LOOKING = re.compile(r"^Looking in (?:indexes|links): (.+)$", re.MULTILINE)
_pip_cache: Dict[str, bool] = {}


def has_pip(python: str, environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``python -m pip`` can run: pip is found, not imported (asked once per interpreter)."""
    if python not in _pip_cache:
        found = python == sys.executable and importlib.util.find_spec("pip") is not None
        if python != sys.executable:
            with contextlib.suppress(EnsureError, OSError):  # it does not run, or not within the minute
                env = pip_env(os.environ if environ is None else environ)
                found = find_modules(python, ["pip"], environ=env, timeout=60)["pip"] != "missing"
        _pip_cache[python] = found
    return _pip_cache[python]


def release_pip(target: str, environ: Mapping[str, str]) -> Tuple[Optional[str], str]:
    """The interpreter whose pip asks the index and downloads the wheel, or None and why not."""
    for python in dict.fromkeys((target, sys.executable)):
        if has_pip(python, environ):
            return python, ""
    tool = "" if sys.executable == target else f" nor ensure-flydsl's own interpreter {sys.executable}"
    return None, (f"there is no pip to download the wheel with: neither FLYDSL_PYTHON={target}{tool} has pip "
                  f"(an install by `uv tool install` has none); give FLYDSL_PYTHON pip (`{target} -m ensurepip "
                  f"--upgrade`, or `uv pip install --python {target} pip`)")


def wheel_tags(interpreter: Interpreter) -> List[str]:
    """pip options that select wheels for the target interpreter on this host."""
    major, minor = interpreter.version.split(".")[:2]
    threading_ = re.match(r"cpython-\d+(t?)-", interpreter.soabi)
    abi = "cp" + major + minor + (threading_.group(1) if threading_ else "")
    if interpreter.implementation != "cpython":
        raise EnsureError(ExitCode.ARTIFACT, f"FlyDSL wheels are for CPython; {interpreter.executable} is "
                          f"{interpreter.implementation}", stage=Stage.RELEASE)
    options = ["--python-version", f"{major}.{minor}", "--implementation", "cp", "--abi", abi]
    for platform in platform_tags():  # the target runs on this host: same libc, same architecture
        options += ["--platform", platform]
    return options


class WheelDownload:
    """``pip download`` of ``flydsl==version`` into the new ``folder``, in the background beside git's fetch;
    bytes arriving there (pip's temporary files too), or a line other than a retry, are its signs of life."""

    def __init__(self, interpreter: Interpreter, version: str, folder: str, environ: Mapping[str, str]) -> None:
        self.interpreter, self.version, self.folder = interpreter, version, folder
        pip, why = release_pip(interpreter.executable, environ)
        if pip is None:
            raise EnsureError(ExitCode.ARTIFACT, why, stage=Stage.RELEASE,
                              hint="give one of them pip, or use FLYDSL_STRATEGY=source to build the pin")
        self.limit = processes.network_silence_s(environ)
        self.cmd = [pip, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--progress-bar", "off",
                    "--dest", folder, *wheel_tags(interpreter), f"flydsl=={version}"]
        scratch = os.path.join(folder, ".tmp")
        os.makedirs(scratch, exist_ok=True)
        env = {**pip_env(environ), "TMPDIR": scratch}
        self._lines: List[str] = []
        self.started = self._last_data = time.monotonic()
        # In the tool's process group: a Ctrl-C or a kill of the group stops it too.
        self._proc: Optional["subprocess.Popen[str]"] = processes.spawn_text(self.cmd, env=env)
        self._reader = threading.Thread(target=self._read, args=(self._proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: "subprocess.Popen[str]") -> None:
        for line in proc.stdout or ():
            self._lines.append(line.rstrip("\n"))
            if _RETRY not in line:
                self._last_data = time.monotonic()

    def index(self) -> str:
        """Where pip looks (its ``Looking in indexes`` line, passwords hidden), for messages."""
        found = _LOOKING.findall("\n".join(self._lines))
        return found[-1].strip() if found else "the package index pip is configured with (PyPI by default)"

    def wheel(self, sink: Callable[[str], None]) -> str:
        """Wait for the wheel's path; pip is stopped, and the error names the index, after the silence limit
        without a byte or a line.  A line is said every half of that limit."""
        sink("$ " + " ".join(self.cmd))
        proc, self._proc = self._proc, None
        assert proc is not None, "the wheel download was already taken"
        try:
            self._watch(proc)
        except BaseException:
            _stop(proc)
            raise
        self._reader.join()
        for line in self._lines:
            sink(line)
        if proc.returncode != 0:
            raise self._failed(proc.returncode)
        wheels = [name for name in os.listdir(self.folder) if name.startswith("flydsl-") and name.endswith(".whl")]
        if len(wheels) != 1:
            raise EnsureError(ExitCode.ARTIFACT, f"pip download of flydsl=={self.version} left {len(wheels)} "
                              f"wheels in {self.folder}, not one", stage=Stage.RELEASE)
        return os.path.join(self.folder, wheels[0])

    def _failed(self, returncode: int) -> EnsureError:
        """Why pip failed; a full file system is said as every full file system is."""
        output, folder = "\n".join(self._lines), self.folder
        quota = f"[Errno {errno.EDQUOT}]" in output or "Disk quota exceeded" in output
        if quota or f"[Errno {errno.ENOSPC}]" in output or "No space left on device" in output:
            return EnsureError(ExitCode.ARTIFACT, f"the flydsl=={self.version} wheel could not be downloaded into "
                               f"{folder}: {space.no_space(folder, errno.EDQUOT if quota else errno.ENOSPC)}",
                               stage=Stage.RELEASE, hint=f"free space on the file system of {folder} (a FlyDSL wheel "
                               "is about 75 MB, its install about 270 MB), or set FLYDSL_ROOT to a folder on a roomier "
                               "one")
        lines = [line for line in self._lines if line.strip()]
        why = next((line.strip() for line in lines if "No matching distribution" in line or "ERROR" in line),
                   lines[-1].strip() if lines else f"pip exited with {returncode}")
        interp = self.interpreter
        return EnsureError(ExitCode.ARTIFACT, f"no flydsl=={self.version} wheel could be downloaded for "
                           f"{interp.executable} (Python {interp.version}, {interp.soabi}): {why}", stage=Stage.RELEASE,
                           hint="the package index has no wheel for this interpreter (FlyDSL publishes cp310-cp314 "
                           "manylinux x86_64); use another FLYDSL_PYTHON or FLYDSL_STRATEGY=source",
                           detail=processes.CommandFailed(self.cmd, returncode, output).describe())

    def _watch(self, proc: "subprocess.Popen[str]") -> None:
        size, beat = -1, min(30.0, self.limit / 2)
        last_beat = time.monotonic()
        while True:
            try:
                proc.wait(timeout=0.25)
                return
            except subprocess.TimeoutExpired:
                pass
            now, grown = time.monotonic(), folder_bytes(self.folder)
            if grown > size:  # bytes arrived (the first look counts those that came while nobody watched)
                if grown > 0:
                    self._last_data = now
                size = grown
            silent = now - self._last_data
            if silent >= self.limit:
                _stop(proc)
                self._reader.join()
                raise EnsureError(ExitCode.ARTIFACT, f"the flydsl=={self.version} wheel's download stopped: nothing "
                                  f"received from {self.index()} for {self.limit:g} s", stage=Stage.RELEASE,
                                  hint="check the network or pip's configuration (PIP_INDEX_URL, PIP_FIND_LINKS, "
                                  "pip.conf); or use FLYDSL_STRATEGY=source", detail="\n".join(self._lines[-20:]))
            if now - last_beat >= beat:
                last_beat = now
                processes.heartbeat(processes.waiting_line(f"the flydsl=={self.version} wheel's download", self.index(),
                                       now - self.started, silent, self.limit))

    def abort(self) -> None:
        """Stop it if it still runs (the run failed, or took another way)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _stop(proc)


def _stop(proc: "subprocess.Popen[str]") -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(ValueError, OSError):
        proc.wait()
