"""Issue 27 item 7: where the suite's time goes at ``-n N``, one xdist schedule after the other in one run: the
suite's wall time, its CPU (user + sys of pytest and everything it waited for), when each worker ran out of
tests, how long one worker ran alone at the end, and the tests that waited most (wall time less their CPU).

A plugin written into a scratch folder stamps every test (start, wall, its worker's CPU and its children's);
the table is made from the stamps.  Run it from a checkout with the test extra installed, the machine quiet:

    python3 benchmarks/suite_timeline.py [--workers 2] [--dist load --dist worksteal] [--top 10] [-- PATHS...]

Two CPU loops on two cores are timed before each schedule (``calibration``): the machine's own speed moves
(by a third within an hour here), so compare schedules of one run.  Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

from common import PROJECT, describe_machine, say, table

PLUGIN = '''
import os, resource, time
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started, clock = time.time(), time.monotonic()
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    yield
    own2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (own2.ru_utime + own2.ru_stime - own.ru_utime - own.ru_stime
           + kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime)
    line = "%.3f\\t%.3f\\t%.3f\\t%s\\t%s\\n" % (started, time.monotonic() - clock, cpu,
                                               os.environ.get("PYTEST_XDIST_WORKER", "-"), item.nodeid)
    fd = os.open(os.environ["SUITE_TIMELINE_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, line.encode())
    os.close(fd)
'''

LOOP = "import time; t = time.perf_counter(); s = 0\nfor i in range(10_000_000): s += i\nprint(time.perf_counter() - t)"


def calibration() -> str:
    """Two CPU loops at once, one per core: seconds each."""
    procs = [subprocess.Popen([sys.executable, "-c", LOOP], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    return " / ".join(f"{float(p.communicate()[0]):.2f}" for p in procs)


def run_suite(dist: str, workers: int, paths: Sequence[str], scratch: str) -> Tuple[float, float, List[List[str]]]:
    log = os.path.join(scratch, f"{dist}.log")
    env = dict(os.environ, SUITE_TIMELINE_LOG=log,
               PYTHONPATH=os.pathsep.join(filter(None, [scratch, os.environ.get("PYTHONPATH")])))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", dist,
                          "-p", "suite_timeline_plugin", "-p", "no:cacheprovider", *paths],
                         cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=False)
    wall = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    say(f"{dist}: {out.stdout.strip().splitlines()[-1] if out.stdout.strip() else 'no output'}")
    if not os.path.exists(log):
        raise SystemExit(f"pytest ran no test ({dist}, exit {out.returncode}): {out.stdout[-2000:]}\n"
                         "run this with an interpreter that has the test extra installed")
    with open(log) as handle:
        rows = [line.rstrip("\n").split("\t") for line in handle]
    rows = [[str(float(r[0]) - started), *r[1:]] for r in rows]
    return wall, cpu, rows


def worker_ends(rows: List[List[str]]) -> Dict[str, float]:
    ends: Dict[str, float] = {}
    for start, wall, _cpu, worker, _test in rows:
        ends[worker] = max(ends.get(worker, 0.0), float(start) + float(wall))
    return ends


def stale_bytecode() -> List[str]:
    """The tool's modules whose bytecode is missing or older than their source, as the suite's interpreter
    imports them.  An editable install under PYTHONDONTWRITEBYTECODE never writes them: every process of
    the tool then compiles them again (a cold ``ensure``: 96 ms of its own 280 ms of CPU here, and the suite
    calls the tool thousands of times), where CI's fresh install has them compiled by pip."""
    import importlib.util

    spec = importlib.util.find_spec("ensure_flydsl")  # where this interpreter imports it from, without running it
    stale: List[str] = []
    for folder, _dirs, files in os.walk(os.path.dirname(spec.origin) if spec and spec.origin else os.devnull):
        for name in files:
            if name.endswith(".py"):
                source = os.path.join(folder, name)
                cached = importlib.util.cache_from_source(source)
                if not os.path.exists(cached) or os.path.getmtime(cached) < os.path.getmtime(source):
                    stale.append(source)
    return stale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--dist", action="append", help="an xdist schedule (default: load, then worksteal)")
    parser.add_argument("--top", type=int, default=10, help="how many of the tests that waited most to list")
    parser.add_argument("paths", nargs="*", help="what to run (default: the whole suite)")
    args = parser.parse_args()
    schedules = args.dist or ["load", "worksteal"]
    say(describe_machine())
    stale = stale_bytecode()
    if stale:
        say(f"warning: {len(stale)} of the tool's modules have no current bytecode (e.g. {stale[0]}): each call of "
            f"the tool compiles them, which CI's fresh install never does; run `python3 -m compileall -q src` "
            f"(without PYTHONDONTWRITEBYTECODE) first")
    summary, last = [], []
    with tempfile.TemporaryDirectory(prefix="suite-timeline-") as scratch:
        with open(os.path.join(scratch, "suite_timeline_plugin.py"), "w") as handle:
            handle.write(PLUGIN)
        for dist in schedules:
            calibrated = calibration()
            wall, cpu, rows = run_suite(dist, args.workers, args.paths, scratch)
            ends = sorted(worker_ends(rows).values())
            busy = sum(float(r[1]) for r in rows)
            summary.append([dist, f"{wall:.0f}", f"{cpu:.0f}", f"{100 * cpu / (args.workers * wall):.0f}",
                            " / ".join(f"{e:.0f}" for e in ends), f"{ends[-1] - ends[0]:.0f}",
                            f"{sum(float(r[1]) - float(r[2]) for r in rows):.0f}", f"{args.workers * wall - busy:.0f}",
                            calibrated])
            last = rows
    print(table(f"The suite at -n {args.workers}, {len(last)} tests, one schedule after the other",
                ["schedule", "wall s", "CPU s", "cores busy %", "workers ran out at s", "first to last out s",
                 "tests waiting s", "between tests s", "calibration s"], summary))
    idle = sorted(last, key=lambda r: float(r[2]) - float(r[1]))[: args.top]
    print(table(f"The tests that waited most ({schedules[-1]}): wall less CPU",
                ["test", "waited s", "wall s", "CPU s"],
                [[r[4], f"{float(r[1]) - float(r[2]):.1f}", f"{float(r[1]):.1f}", f"{float(r[2]):.1f}"] for r in idle]))


if __name__ == "__main__":
    main()
