"""What the benchmarks share: the Runner (the tool installed from this checkout, not editable, the target
interpreter, the work folder, one timed call), the real root provisioned once, figures and tables.

Imported by provisioning.py's benchmarks (warm_call, cold_provisioning, mlir_cache) and by cold_paths.py
and fast_paths.py; run none of them from here.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers

REAL_REPO_VAR = "ENSURE_FLYDSL_REAL_REPO"
REAL_PIN = "v0.2.2"
REAL_VERSION = "0.2.2"
TORCH = "torch==2.13.0"


# -- small helpers ---------------------------------------------------------------------------------------------
def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def check(cmd: Sequence[str], **kwargs: object) -> str:
    proc = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)  # type: ignore
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout.decode(errors='replace')}")
    return str(proc.stdout.decode(errors="replace"))


def mib(size: float) -> str:
    return f"{size / 1024**2:.1f} MiB"


def folder_size(folder: str) -> Tuple[int, int]:
    total = files = 0
    for current, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(current, name)).st_size
                files += 1
            except OSError:
                pass
    return total, files


@dataclasses.dataclass
class Sample:
    seconds: float  # wall time of the whole command
    durations: Dict[str, float]  # the result's step durations (empty when there is no result)

    def steps(self, *names: str) -> float:
        return sum(self.durations.get(n, 0.0) for n in names)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = [i > 0 and all(_numeric(r[i]) for r in cells[1:]) for i in range(len(header))]
    lines = [f"\n{title}\n"]
    for n, row in enumerate(cells):
        padded = [c.rjust(w) if right[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append("| " + " | ".join(padded) + " |")
        if n == 0:
            lines.append("|" + "|".join(("-" * (w + 1) + ":") if right[i] else "-" * (w + 2)
                                        for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "-.") or text in ("", "-")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


class Runner:
    """The tool, the target interpreter and the work folder, set up once."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work = os.path.abspath(os.path.expanduser(args.work))
        os.makedirs(os.path.join(self.work, "runs"), exist_ok=True)
        self.real_repo = os.environ.get(REAL_REPO_VAR) or None
        self._tool: Optional[str] = args.tool
        self._target: Optional[str] = args.target_python

    # -- setup ---------------------------------------------------------------------------------------------
    @property
    def tool(self) -> str:
        if self._tool is None:
            venv = os.path.join(self.work, "tool-venv")
            fresh = not os.path.exists(os.path.join(venv, "bin", "python"))
            if fresh:
                say(f"creating the tool's venv {venv}")
                check([sys.executable, "-m", "venv", venv])
            say(f"installing ensure-flydsl from {PROJECT} (not editable) into {venv}")
            extra = [] if fresh else ["--no-deps", "--force-reinstall"]
            check([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", *extra, PROJECT])
            self._tool = os.path.join(venv, "bin", "ensure-flydsl")
        return self._tool

    @property
    def tool_python(self) -> str:
        with open(self.tool) as handle:
            first = handle.readline()
        return first[2:].strip() if first.startswith("#!") else sys.executable

    @property
    def target(self) -> str:
        if self._target is None:
            venv = os.path.join(self.work, "target-venv")
            python = os.path.join(venv, "bin", "python")
            if not os.path.exists(os.path.join(venv, ".bench-ready")):
                base = shutil.which(self.args.base_python)
                if base is None:
                    raise SystemExit(f"{self.args.base_python} is not on PATH (--base-python, or --target-python)")
                say(f"creating the target venv {venv} with {base} and installing {TORCH} numpy")
                check([base, "-m", "venv", "--clear", venv])
                check([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", TORCH,
                       "numpy"])
                open(os.path.join(venv, ".bench-ready"), "w").close()
            self._target = python
        return self._target

    def env(self, **extra: str) -> Dict[str, str]:
        """The caller's environment without this tool's settings, with ``extra``."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        env["ROCM_PATH"] = os.path.join(self.work, "no-rocm")
        # The user's cache folder of the benchmark's own (the ETA history, the default host store): a
        # benchmark never changes what the real user's runs predict or share.
        env["XDG_CACHE_HOME"] = os.path.join(self.work, "user-cache")
        env.update(extra)
        return env

    def real_env(self, root: str, strategy: str, **extra: str) -> Dict[str, str]:
        assert self.real_repo is not None
        return self.env(FLYDSL_ROOT=root, FLYDSL_REPO=self.real_repo, FLYDSL_PIN=REAL_PIN,
                        FLYDSL_STRATEGY=strategy, FLYDSL_PYTHON=self.target, **extra)

    def wheelhouse(self) -> Tuple[str, int]:
        """The flydsl wheel for the target, downloaded once: (folder, wheel bytes)."""
        folder = os.path.join(self.work, "wheelhouse")
        wheels = glob.glob(os.path.join(folder, f"flydsl-{REAL_VERSION}-*.whl"))
        if not wheels:
            say(f"downloading flydsl=={REAL_VERSION} for {self.target} into {folder}")
            check([self.target, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                   "--only-binary=:all:", "-d", folder, f"flydsl=={REAL_VERSION}"])
            wheels = glob.glob(os.path.join(folder, f"flydsl-{REAL_VERSION}-*.whl"))
        return folder, os.path.getsize(wheels[0])

    def offline(self, pip_cache: str) -> Dict[str, str]:
        folder, _size = self.wheelhouse()
        return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": folder, "PIP_CACHE_DIR": pip_cache}

    def fresh_base(self, label: str) -> str:
        return tempfile.mkdtemp(prefix=label + "-", dir=os.path.join(self.work, "runs"))

    # -- one call ------------------------------------------------------------------------------------------
    def call(self, argv: Sequence[str], env: Dict[str, str], want_json: bool = True) -> Tuple[float, Dict[str, Any]]:
        started = time.perf_counter()
        proc = subprocess.run(list(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.work)
        elapsed = time.perf_counter() - started
        if proc.returncode != 0:
            tail = proc.stderr.decode(errors="replace")[-3000:]
            raise SystemExit(f"exit {proc.returncode}: {' '.join(argv)}\n{tail}")
        result: Dict[str, Any] = {}
        if want_json:
            result = json.loads(proc.stdout)
        return elapsed, result


# -- the real root ---------------------------------------------------------------------------------
def provisioned_real_root(r: Runner) -> str:
    """The root of (a), provisioned with the release strategy from the wheelhouse (offline) once."""
    root = os.path.join(r.work, "warm", "FlyDSL")
    env = r.real_env(root, "release", **r.offline(os.path.join(r.work, "warm", "pip-cache")))
    os.makedirs(os.path.dirname(root), exist_ok=True)
    seconds, result = r.call([r.tool, "--json"], env)
    say(f"{root}: {result['action']} ({result['how']}, flydsl {result['version']}) in {seconds:.1f} s")
    return root


def describe_machine(r: Optional[Runner] = None) -> str:
    try:
        commit = check(["git", "-C", PROJECT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = " (with uncommitted changes)" if check(["git", "-C", PROJECT, "status", "--porcelain", "--",
                                                         "src"]).strip() else ""
    except SystemExit:
        commit, dirty = "?", ""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return (f"{datetime.date.today().isoformat()}, {platform.node()}: {os.cpu_count()} cores, {mem:.0f} GiB, "
            f"{platform.system()} {platform.release()}, ensure-flydsl at {commit}{dirty}")
