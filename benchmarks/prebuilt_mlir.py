"""Issue 43: the pin built with its LLVM/MLIR built (FLYDSL_MLIR_URL=off) beside the pin built against a prebuilt
MLIR (FLYDSL_MLIR_URL=...), side by side in fresh roots: wall time, build_llvm.sh runs, bytes downloaded, where the
MLIR came from, and the one-tree import of the result.

    python3 benchmarks/prebuilt_mlir.py fixture [--rounds 3] [--llvm-sleep 2]
        the tests' fixture (build_llvm.sh sleeps 4 x --llvm-sleep s) and a prebuilt served over HTTP on loopback
    python3 benchmarks/prebuilt_mlir.py real [--url triton] --target-python PY_WITH_TORCH
        the real check, on a ROCm machine with network: the default pin from GitHub, twice, LLVM built vs the
        prebuilt (about 20 minutes for the first, a few for the second); it prints both times and the import
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

from common import Runner, describe_machine, median, say, table, verdict

from tests.helpers.flydsl_fixture import counts, make_repo
from tests.helpers.mlir_server import mlir_server, mlir_tarball

ONE_TREE = ('. "$1" && "$2" -c "import flydsl, kernels.moe_gemm_2stage as k; print(flydsl.__file__); '
            'print(k.__file__); print(flydsl.__version__)"')


def one_tree(root: str, python: str, env: Dict[str, str]) -> Tuple[bool, str]:
    """The README's last step: source the env file, import both modules; whether they come from one tree."""
    proc = subprocess.run(["bash", "-c", ONE_TREE, "bash", os.path.join(root, "flydsl_env.sh"), python],
                          env={k: v for k, v in env.items() if k != "PYTHONPATH"}, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, cwd="/")
    lines = proc.stdout.strip().splitlines()
    ok = proc.returncode == 0 and len(lines) == 3 and all(line.startswith(root) for line in lines[:2])
    return ok, lines[-1] if lines else f"exit {proc.returncode}"


def run_pin(r: Runner, label: str, env: Dict[str, str], python: str) -> Dict[str, object]:
    base = r.fresh_base(label)
    root = os.path.join(base, "FlyDSL")
    counter = os.path.join(base, "counters")
    os.makedirs(counter)
    env = dict(env, FLYDSL_ROOT=root, FIXTURE_COUNTER_DIR=counter, XDG_CACHE_HOME=os.path.join(base, "xdg"),
               FLYDSL_STORE="off")
    try:
        seconds, result = r.call([r.tool, "--json"], env)
        imported, version = one_tree(root, python, env)
        return {"s": seconds, "mlir": result.get("mlir"), "llvm": len(counts(counter, "llvm")),
                "build": len(counts(counter, "build")), "import": imported, "version": version}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def rows_of(samples: Dict[str, List[Dict[str, object]]]) -> List[Tuple[object, ...]]:
    rows = []
    for label, runs in samples.items():
        times = [float(str(run["s"])) for run in runs]
        rows.append((label, f"{median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}",
                     sum(int(str(run["llvm"])) for run in runs), sum(int(str(run["build"])) for run in runs),
                     ",".join(sorted({str(run["mlir"]) for run in runs})),
                     verdict(all(bool(run["import"]) for run in runs)), len(runs)))
    return rows


HEADER = ["run", "median s", "min s", "max s", "build_llvm.sh runs", "build.sh runs", "mlir", "one-tree import",
          "runs"]


def bench_fixture(r: Runner) -> str:
    work = r.fresh_base("prebuilt-fixture")
    try:
        repo = make_repo(os.path.join(work, "FlyDSL.git"))
        with mlir_server(os.path.join(work, "served")) as server:
            size = os.path.getsize(mlir_tarball(os.path.join(work, "served", "llvm-11111111-ubuntu-x64.tar.gz")))
            env = r.env(FLYDSL_REPO=repo.url, FLYDSL_PIN=repo.commits["dev"], FLYDSL_PYTHON=sys.executable,
                        FLYDSL_STRATEGY="source", FIXTURE_LLVM_SLEEP=str(r.args.llvm_sleep))
            url = server.url + "/llvm-{llvm8}-ubuntu-x64.tar.gz"
            samples: Dict[str, List[Dict[str, object]]] = {"LLVM built (off)": [], f"prebuilt ({url})": []}
            for i in range(r.args.rounds):
                order = [("LLVM built (off)", "off"), (f"prebuilt ({url})", url)]
                for label, setting in order if i % 2 == 0 else order[::-1]:  # interleaved
                    samples[label].append(run_pin(r, "pin", dict(env, FLYDSL_MLIR_URL=setting), sys.executable))
            downloads = server.hits["/llvm-11111111-ubuntu-x64.tar.gz"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    skipped = all(run["llvm"] == 0 for run in samples[f"prebuilt ({url})"])
    title = (f"issue 43 on the fixture: the pin with LLVM built vs a prebuilt MLIR ({size} B, "
             f"downloaded {downloads} times); build_llvm.sh sleeps 4 x {r.args.llvm_sleep:g} s\n{describe_machine(r)}")
    return table(title, HEADER, rows_of(samples)) + f"\nLLVM steps skipped by every prebuilt run: {verdict(skipped)}"


def bench_real(r: Runner) -> str:
    python = r.target
    env = r.env(FLYDSL_PYTHON=python, FLYDSL_STRATEGY="source")
    samples: Dict[str, List[Dict[str, object]]] = {}
    for label, setting in (("LLVM built (off)", "off"), (f"prebuilt ({r.args.url})", r.args.url)):
        say(f"{label}: the default pin from scratch")
        samples[label] = [run_pin(r, "real", dict(env, FLYDSL_MLIR_URL=setting), python)]
    title = f"issue 43, the real check: the default pin, LLVM built vs prebuilt MLIR\n{describe_machine(r)}"
    return table(title, HEADER, rows_of(samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("fixture", "real"))
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench")
    parser.add_argument("--tool", help="an installed ensure-flydsl to measure (default: this checkout, installed)")
    parser.add_argument("--target-python", help="the interpreter with torch (real; default: a venv under --work)")
    parser.add_argument("--base-python", default="python3.11")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--llvm-sleep", type=float, default=2.0)
    parser.add_argument("--url", default="triton", help="FLYDSL_MLIR_URL of the real check (default triton)")
    r = Runner(parser.parse_args())
    print(bench_fixture(r) if r.args.mode == "fixture" else bench_real(r))


if __name__ == "__main__":
    main()
