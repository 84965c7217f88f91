"""Issue 13: cold provisioning of the real pin, the tool before the issue and now, beside the floors.

    export ENSURE_FLYDSL_REAL_REPO=/work/.mirror/ROCm+FlyDSL/repo   # a FlyDSL clone or bare mirror
    python benchmarks/cold_paths.py [--runs 5] [--before e52e6f2] [--work DIR]

Every round, in a rotating order, on a fresh root each time:
  release   FLYDSL_STRATEGY=release FLYDSL_PIN=v0.2.2, the wheel from a wheelhouse (PIP_NO_INDEX=1,
            PIP_FIND_LINKS: pip still chooses it), before and now;
  cache     FLYDSL_STRATEGY=source with FLYDSL_CACHE holding the real released tree (272 MiB), before and now;
  fetch     the cache's fetch of that entry alone, in a process of its own, before and now, with its peak RSS;
and the floors: `python -c pass` and `python -c "import torch"` in the target interpreter, `pip download`
of the wheel alone from the same wheelhouse, `git clone --no-local` of the pin alone.

"Before" is `git archive` of --before (default e52e6f2, the commit before issue 13 began), installed NOT
editable into its own venv; "now" is this checkout, installed the same way (common.py's Runner: the
target venv with torch==2.13.0 CPU and numpy, the wheelhouse and the cache entry are shared with it, under
--work).  Figures are medians of wall time measured from this script; peak RSS is GNU time's %M.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cold_provisioning as cold  # noqa: E402
import common as p  # noqa: E402

Case = Callable[[], Tuple[float, float]]  # one measurement: (wall seconds, peak RSS MiB or nan)
NAN = float("nan")


def before_tool(work: str, rev: str) -> str:
    """The tool at ``rev``, from `git archive`, installed not editable into a venv of its own."""
    src = os.path.join(work, f"before-{rev}")
    venv = os.path.join(work, f"before-{rev}-venv")
    tool = os.path.join(venv, "bin", "ensure-flydsl")
    if not os.path.exists(tool):
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        archive = subprocess.run(["git", "-C", p.PROJECT, "archive", rev], stdout=subprocess.PIPE, check=True)
        subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
        p.check([sys.executable, "-m", "venv", venv])
        p.check([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", src])
    return tool


def timed(cmd: List[str], env: Dict[str, str], cwd: str) -> Tuple[float, float]:
    """Wall seconds and peak RSS (MiB, of that process: GNU time's %M) of one command that must succeed."""
    started = time.perf_counter()
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stderr.decode(errors='replace')[-2000:]}")
    return seconds, int(out.stderr.decode().strip().splitlines()[-1]) / 1024


def cases(now: p.Runner, before: p.Runner, cache_dir: str, key: str) -> Dict[str, Case]:
    work = now.work
    pip_caches = os.path.join(work, "runs", "pip-caches")

    def release(r: p.Runner) -> Case:
        return lambda: (cold.cold_run(r, "release", "release", r.offline(pip_caches)).seconds, NAN)

    def cache_hit(r: p.Runner) -> Case:
        return lambda: (cold.cold_run(r, "cache", "source", {"FLYDSL_CACHE": cache_dir}).seconds, NAN)

    def fetch(r: p.Runner) -> Case:
        return lambda: timed([r.tool_python, "-c", cold.FETCH_ENTRY, cache_dir, key, os.path.join(work, "runs")],
                             r.env(), work)

    def download() -> Tuple[float, float]:
        folder = now.fresh_base("download")
        try:
            wheelhouse, _ = now.wheelhouse()
            return timed([now.target, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                          "--only-binary=:all:", "--no-index", "--find-links", wheelhouse, "-d", folder,
                          f"flydsl=={p.REAL_VERSION}"], dict(now.env(), PIP_CACHE_DIR=pip_caches), work)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def clone() -> Tuple[float, float]:
        folder = now.fresh_base("clone")
        try:
            assert now.real_repo is not None
            return timed(["git", "clone", "-q", "--no-local", "--single-branch", "--branch", p.REAL_PIN, "--no-tags",
                          now.real_repo, os.path.join(folder, "FlyDSL")], now.env(), work)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    return {
        "release before": release(before), "release now": release(now),
        "cache hit before": cache_hit(before), "cache hit now": cache_hit(now),
        "fetch before": fetch(before), "fetch now": fetch(now),
        "floor: python -c pass": lambda: timed([now.target, "-c", "pass"], now.env(), work),
        "floor: python -c 'import torch'": lambda: timed([now.target, "-c", "import torch"], now.env(), work),
        "floor: pip download of the wheel alone": download,
        "floor: git clone of the pin alone": clone,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--before", default="e52e6f2", help="the commit to compare with (default e52e6f2)")
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "ensure-flydsl-bench"))
    parser.add_argument("--target-python", help="the target interpreter, with torch and numpy (default: make one)")
    parser.add_argument("--base-python", default="python3.11", help="what the target venv is made from")
    args = parser.parse_args()
    args.tool = None
    now = p.Runner(args)
    if now.real_repo is None:
        raise SystemExit(f"set {p.REAL_REPO_VAR} to a FlyDSL clone or mirror holding the tag {p.REAL_PIN}")
    before = p.Runner(args)
    before._tool = before_tool(now.work, args.before)  # noqa: SLF001 (the Runner's own slot for --tool)
    released = p.provisioned_real_root(now)
    cache_dir = os.path.join(now.work, "cache")
    key = str(cold.cache_entry(now, released, cache_dir)["key"])
    measured = cases(now, before, cache_dir, key)
    names = list(measured)
    samples: Dict[str, List[Tuple[float, float]]] = {name: [] for name in names}
    load_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    for i in range(args.runs):
        p.say(f"round {i + 1} of {args.runs}")
        for name in names[i % len(names):] + names[:i % len(names)]:  # rotate: no case always runs first
            samples[name].append(measured[name]())
    rows = []
    for name in names:
        walls = [s for s, _ in samples[name]]
        rss = [m for _, m in samples[name] if m == m]
        ratio = ""
        if name.endswith(" now"):
            ratio = f"{p.median(walls) / p.median([s for s, _ in samples[name[:-4] + ' before']]):.2f}x"
        rows.append((name, f"{p.median(walls):.2f}", f"{min(walls):.2f}", f"{max(walls):.2f}", ratio,
                     f"{max(rss):.0f}" if rss else "-", len(walls)))
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(p.describe_machine(now))
    print(p.table(f"cold paths of {p.REAL_PIN} (before = {args.before}); load average {load_start} at the start, "
                  f"{load} at the end", ["case", "median s", "min s", "max s", "now / before", "peak RSS MiB",
                                         "runs"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
