"""Issue 27 item 7: what a call of the tool costs before its work starts, command by command, before and now side
by side in one run: the CPU (user + sys) of each command, the instructions of its own process (callgrind) and the
modules it imports (`python -X importtime`).

Each round is a fresh workspace of the tests' fixture (tests/helpers/flydsl_fixture.py: make_repo, and
tests/helpers/workspace.py: Workspace, the source strategy, no ROCm): a cold ensure (a source build of the
fixture), a warm ensure, `status`, `wait --timeout 0`, `doctor`, `clean`, then `start` with its detached worker
and watchdog (this script is their subreaper: it waits for them and counts their CPU with the command that left
them, a provisioning run's watchdog with that run's).  A command's CPU includes what it waited for (git, the
fixture's build, the probe); its instructions and modules are its own process's.  The user's cache folder is
one under --work (XDG_CACHE_HOME), never the real ~/.cache.

    python3 benchmarks/cold_imports.py [--runs 3] [--before REV|TOOL ...] [--no-callgrind]

``--before`` as in geak_folder.py, and as often as wanted (a column each): a revision of this checkout installed
(not editable) into its own venv under --work, or an installed ``ensure-flydsl``.  Prints a table; asserts nothing.
Issue 40's figures: ``--before 48bb569 --before 2bcb8d4`` (before the stand-ins went; before the dispatch imported a
command's module only when it runs).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from common import PROJECT, Runner, check, describe_machine, median, say, table
from geak_folder import before_tool

sys.path.append(os.path.join(PROJECT, "src"))  # the tests' helpers import the package (an installed one first)
from tests.helpers.flydsl_fixture import make_repo  # noqa: E402
from tests.helpers.workspace import Workspace  # noqa: E402

# (label, the tool's arguments) in the order a round runs them.
COMMANDS: Sequence[Tuple[str, Sequence[str]]] = (
    ("ensure, cold (fixture source build)", ()),
    ("ensure, warm", ()),
    ("status", ("status",)),
    ("wait --timeout 0", ("wait", "--timeout", "0")),
    ("env", ("env",)),
    ("doctor", ("doctor",)),
    ("clean", ("clean",)),
    ("start (+ worker, watchdog)", ("start",)),
)
MODES = ("cpu", "instructions", "modules")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """The detached worker and watchdog (start's grandchildren) are reparented to this process: waited for here."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: the worker's CPU could not be counted")


def reap_orphans(deadline: float) -> float:
    """The CPU of every descendant left (start's worker, a run's watchdog), once each has ended."""
    cpu = 0.0
    while time.monotonic() < deadline:
        try:
            pid, _status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return cpu
        if pid == 0:
            time.sleep(0.05)
            continue
        cpu += usage.ru_utime + usage.ru_stime
    raise SystemExit("start's worker or watchdog did not end in time")


def one(argv: List[str], env: Dict[str, str], mode: str) -> Tuple[float, int]:
    """(the measure of ``mode``, the exit code): the instructions of the call's own process, or the modules it
    imported."""
    if mode == "instructions":
        argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv]
    elif mode == "modules":
        argv = [argv[0], "-X", "importtime", *argv[1:]]
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    text = proc.stderr.decode(errors="replace")
    if mode == "instructions":
        found = re.search(r"Collected : (\d+)", text)
        if found is None:
            raise SystemExit(f"no callgrind total from {' '.join(argv)}:\n{text[-2000:]}")
        return float(found.group(1)), proc.returncode
    return float(sum(1 for line in text.splitlines() if line.startswith("import time:")) - 1), proc.returncode


def cpu_of(argv: List[str], env: Dict[str, str]) -> Tuple[float, int]:
    """One call's CPU (user + sys, with what it waited for), from the kernel's record of the ended process."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime, proc.returncode


def a_round(tool: Sequence[str], work: str, mode: str) -> Dict[str, Tuple[float, int]]:
    """Every command once in a fresh workspace, each measured by ``mode``."""
    base = tempfile.mkdtemp(prefix="round-", dir=work)
    repo = make_repo(os.path.join(base, "upstream", "FlyDSL.git"))
    ws = Workspace(os.path.join(base, "base"), repo)
    env = dict(ws.env, XDG_CACHE_HOME=os.path.join(base, "user-cache"))
    found: Dict[str, Tuple[float, int]] = {}
    for label, args in COMMANDS:
        argv = [*tool, *args]
        value, code = cpu_of(argv, env) if mode == "cpu" else one(argv, env, mode)
        # What the call left running (start's worker, a provisioning run's watchdog) counts with that call.
        orphans = reap_orphans(time.monotonic() + 600)
        if mode == "cpu":
            value += orphans
        found[label] = (value, code)
    subprocess.run([*tool, "clean"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    shutil.rmtree(base, ignore_errors=True)
    return found


def python_of(script: str) -> List[str]:
    """The console script as its interpreter runs it (so that -X importtime reaches the tool's process)."""
    with open(script) as handle:
        first = handle.readline()
    return [first[2:].strip() if first.startswith("#!") else sys.executable, script]


def bench(r: Runner) -> str:
    become_subreaper()
    tools: Dict[str, List[str]] = {"now": python_of(r.tool)}
    tools = {**{rev: python_of(before_tool(r, rev)) for rev in r.args.before}, **tools}
    work = os.path.join(r.work, "cold-imports")
    os.makedirs(work, exist_ok=True)
    samples: Dict[Tuple[str, str, str], List[float]] = {}
    codes: Dict[Tuple[str, str], set] = {}
    modes = [m for m in MODES if not (m == "instructions" and r.args.no_callgrind)]
    for mode in modes:
        rounds = r.args.runs if mode == "cpu" else 1
        for n in range(rounds):
            for name, tool in tools.items():
                say(f"{mode}, round {n + 1}/{rounds}: {name}")
                for label, (value, code) in a_round(tool, work, mode).items():
                    samples.setdefault((name, label, mode), []).append(value)
                    codes.setdefault((name, label), set()).add(code)
    names = list(tools)
    header = ["command"]
    for title in ("CPU ms", "M instructions", "modules"):
        header += [f"{title} ({name})" for name in names]
    header.append("exit")
    rows = []
    for label, _args in COMMANDS:
        row: List[object] = [label]
        for mode, scale, form in (("cpu", 1000, "{:.0f}"), ("instructions", 1e-6, "{:.1f}"), ("modules", 1, "{:.0f}")):
            for name in names:
                values = samples.get((name, label, mode))
                row.append(form.format(median(values) * scale) if values else "-")
        row.append("/".join(",".join(str(c) for c in sorted(codes[(name, label)])) for name in names))
        rows.append(row)
    floor = [*tools["now"][:1], "-c", "pass"]
    floor_cpu = median([cpu_of(floor, os.environ.copy())[0] for _ in range(5)])
    floor_row: List[object] = ["floor: python3 -c pass", *[f"{floor_cpu * 1000:.0f}"] * len(names)]
    if "instructions" in modes:
        floor_row += [f"{one(floor, os.environ.copy(), 'instructions')[0] * 1e-6:.1f}"] * len(names)
    else:
        floor_row += ["-"] * len(names)
    floor_row += [f"{one(floor, os.environ.copy(), 'modules')[0]:.0f}"] * len(names) + ["0"]
    rows.append(floor_row)
    title = (f"the tool's commands on the fixture, CPU median of {r.args.runs} rounds, instructions and modules of "
             f"one\n{describe_machine(r)}")
    return table(title, header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench")
    parser.add_argument("--tool", help="an installed ensure-flydsl to measure (default: this checkout, installed)")
    parser.add_argument("--runs", type=int, default=3, help="rounds timed for the CPU (default 3)")
    parser.add_argument("--before", metavar="REV|TOOL", action="append", default=[], help="also measure the tool "
                        "before a change, in the same rounds: a revision of this checkout (installed into its own "
                        "venv) or an installed ensure-flydsl; once per column")
    parser.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts (valgrind)")
    parser.add_argument("--target-python")
    parser.add_argument("--base-python", default="python3")
    r = Runner(parser.parse_args())
    if shutil.which("valgrind") is None and not r.args.no_callgrind:
        raise SystemExit("valgrind is not on PATH (or --no-callgrind)")
    check(["git", "--version"])
    print(bench(r))


if __name__ == "__main__":
    main()
