"""Issue 4's benchmarks: the warm call, cold provisioning (release wheel, cache hit), the MLIR cache.

    export ENSURE_FLYDSL_REAL_REPO=/work/.mirror/ROCm+FlyDSL/repo   # a FlyDSL clone or bare mirror
    python benchmarks/provisioning.py all [--runs 5] [--warm-runs 15] [--work DIR]
    python benchmarks/provisioning.py warm|cold|mlir ...            # one benchmark

warm  (a)  `ensure-flydsl` on a provisioned real tree (flydsl 0.2.2 wheel + v0.2.2 kernels, CPU torch in
           the target interpreter), answered from the fingerprint, vs the full import probe
           (`ensure-flydsl --verify`, `ensure-flydsl verify`); --warm-runs interleaved rounds.
cold  (b)  a fresh root provisioned with FLYDSL_STRATEGY=release: the wheel downloaded from the package index
           (--download-runs, beside `pip download` of the wheel alone), and offline from a wheelhouse
           (PIP_NO_INDEX=1 PIP_FIND_LINKS=..., the tool without the network; --runs);
      (c)  a fresh root provisioned with FLYDSL_STRATEGY=source from a cache entry of the real released tree
           (fetch, verification of every hash, full import probe); --runs interleaved rounds.
mlir  (d)  two "hosts" (two base folders) share one FLYDSL_CACHE: host A builds the fixture's pin `dev`,
           host B then builds `v0.2.3` (same LLVM commit); B with the cache (MLIR fetched, build_llvm.sh
           skipped) vs B without it; the fixture's LLVM step sleeps --llvm-sleep s at each of its 4 steps.

The real repository comes from ENSURE_FLYDSL_REAL_REPO (never copied into this project); without it `warm`
and `cold` are skipped with a message.  Everything is made under --work (default
~/.cache/ensure-flydsl-bench): the tool installed from this checkout, NOT editable, into its own venv
(`tool-venv`, reinstalled at each start; or --tool PATH), the target venv (`target-venv`: Python 3.11 with
torch==2.13.0 and numpy; or --target-python PATH), the flydsl wheel (`wheelhouse`), the provisioned tree
of (a) and the cache of (c).  Fresh roots are made under --work/runs and removed after each run.
Figures are medians: of the whole command's wall time, measured from this script, and of the step
durations the tool reports in its JSON result.
"""

from __future__ import annotations

import argparse
import os
import time

from cold_provisioning import bench_cold
from common import REAL_PIN, REAL_REPO_VAR, Runner, describe_machine
from mlir_cache import bench_mlir
from warm_call import bench_warm


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("benchmark", nargs="?", default="all", choices=("all", "warm", "cold", "mlir"))
    parser.add_argument("--runs", type=int, default=5, help="rounds of (b)+(c) and of (d) (default 5)")
    parser.add_argument("--warm-runs", type=int, default=15, help="rounds of (a) (default 15)")
    parser.add_argument("--download-runs", type=int, default=3,
                        help="(b) rounds that download the wheel from the index, twice each (default 3)")
    parser.add_argument("--llvm-sleep", type=float, default=2.0, help="(d) seconds per fixture LLVM step (x4)")
    parser.add_argument("--build-sleep", type=float, default=0.0, help="(d) seconds per fixture FlyDSL step (x3)")
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "ensure-flydsl-bench"))
    parser.add_argument("--tool", help="an ensure-flydsl executable to measure (default: install this checkout)")
    parser.add_argument("--target-python", help="the target interpreter, with torch and numpy (default: make one)")
    parser.add_argument("--base-python", default="python3.11", help="what the target venv is made from")
    args = parser.parse_args()
    r = Runner(args)
    wanted = ("warm", "cold", "mlir") if args.benchmark == "all" else (args.benchmark,)
    out = [describe_machine(r)]
    started = time.monotonic()
    load_start = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    for name in wanted:
        if name in ("warm", "cold") and r.real_repo is None:
            out.append(f"\n({name}) SKIPPED: set {REAL_REPO_VAR} to a FlyDSL clone or mirror holding the tag "
                       f"{REAL_PIN} (e.g. {REAL_REPO_VAR}=/work/.mirror/ROCm+FlyDSL/repo)")
            print(out[-1], flush=True)
            continue
        out.append({"warm": bench_warm, "cold": bench_cold, "mlir": bench_mlir}[name](r))
        print(out[-1], flush=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{out[0]}; the benchmarks took {time.monotonic() - started:.0f} s; load average at the end {load} "
          f"(load at start {load_start})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
