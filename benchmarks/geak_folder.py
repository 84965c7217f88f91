"""Issue 25: the warm call through the GEAK folder's `ensure_flydsl.sh`, side by side in one run with the seed's
script on the same tree, `python3 -c pass` and the installed tool.

The tree is the real one (flydsl 0.2.2's wheel beside v0.2.2's kernels, which import torch), provisioned once
by the installed tool (common.py: provisioned_real_root).  The folder is made from this checkout with the
installed tool's `skill` command.  Every call runs as a GEAK container runs it: the target interpreter first on
PATH as `python3`, from GEAK's top folder.  The seed's script is GEAK's own `ensure_flydsl.sh` when
`--seed-script` names it; else a stand-in that does what the seed's warm path does: one `python3` with the tree
first on PYTHONPATH importing flydsl and kernels.moe_gemm_2stage, one `python3` comparing the version with the
floor, and the env file written.

    export ENSURE_FLYDSL_REAL_REPO=/work/.mirror/ROCm+FlyDSL/repo
    python3 benchmarks/geak_folder.py [--runs 15] [--seed-script PATH]
"""

from __future__ import annotations

import argparse
import os
import shutil
from typing import Dict, List, Tuple

from common import REAL_PIN, REAL_VERSION, Runner, check, describe_machine, median, provisioned_real_root, say, table

SKILLS = os.path.join("perf_knowledge", "expert_skills", "skills")

# What the seed's script does on its warm path (this is not its code: its steps, for a like-for-like time).
SEED_STAND_IN = r"""#!/bin/bash
set -uo pipefail
ROOT="${FLYDSL_ROOT:-/opt/flydsl/FlyDSL}"
MIN_VERSION="${FLYDSL_MIN_VERSION:-0.2.2}"
found="$(PYTHONPATH="$ROOT:$ROOT/build-fly/python_packages${PYTHONPATH:+:$PYTHONPATH}" python3 -c '
import flydsl, kernels.moe_gemm_2stage
print(flydsl.__version__)' 2>/dev/null)" || exit 1
newer="$(python3 -c 'import sys
a, b = ([int(p) for p in v.split(".")[:3]] for v in sys.argv[1:])
print(int(a >= b))' "$found" "$MIN_VERSION")"
[ "$newer" = 1 ] || exit 1
cat > "$ROOT/flydsl_env.sh" <<EOF
export FLYDSL_ROOT="$ROOT"
export PYTHONPATH="$ROOT:$ROOT/build-fly/python_packages\${PYTHONPATH:+:\$PYTHONPATH}"
export FLYDSL_SHIM_DIR="$FLYDSL_SHIM_DIR"
export VLLM_USE_FLYDSL_MOE=1
EOF
"""


def geak_tree(r: Runner) -> Tuple[str, str]:
    """GEAK's top folder with the folder made from this checkout at its place; (top, its script)."""
    top = os.path.join(r.work, "geak", "GEAK")
    folder = os.path.join(top, SKILLS, "ensure_flydsl")
    os.makedirs(os.path.join(top, SKILLS, "apply_flydsl_moe_to_vllm"), exist_ok=True)
    args = ["--force"] if os.path.isdir(folder) else []
    check([r.tool, "skill", folder, *args], env=r.env())
    return top, os.path.join(folder, "ensure_flydsl.sh")


def bench(r: Runner) -> str:
    root = provisioned_real_root(r)
    top, script = geak_tree(r)
    seed = r.args.seed_script
    if seed is None:
        seed = os.path.join(r.work, "geak", "seed-stand-in.sh")
        with open(seed, "w") as handle:
            handle.write(SEED_STAND_IN)
    seed_root = os.path.join(r.work, "geak", "seed-root", "FlyDSL")  # the seed writes its env file: a copy's root
    shutil.rmtree(os.path.dirname(seed_root), ignore_errors=True)
    os.makedirs(seed_root)
    for name in ("kernels", "build-fly"):
        os.symlink(os.path.join(root, name), os.path.join(seed_root, name))
    shim = os.path.join(top, SKILLS, "apply_flydsl_moe_to_vllm")
    path = os.pathsep.join([os.path.dirname(r.target), "/usr/bin", "/bin"])
    env = r.real_env(root, "release", PATH=path, FLYDSL_SHIM_DIR=shim)
    calls: Dict[str, Tuple[List[str], Dict[str, str]]] = {
        "GEAK folder: bash ensure_flydsl.sh (warm)": (["bash", script], env),
        "installed tool: ensure-flydsl (warm)": ([r.tool], env),
        "the seed's script on the same tree": (["bash", seed], dict(env, FLYDSL_ROOT=seed_root)),
        "floor: python3 -c pass": ([r.target, "-c", "pass"], env),
    }
    for argv in (["bash", script, "--json"], [r.tool, "--json"]):  # both answer from the fingerprint
        result = r.call(argv, env)[1]
        if set(result.get("durations") or ()) not in ({"fingerprint"}, {"probe", "publish"}):
            raise SystemExit(f"{argv}: unexpected steps {result.get('durations')}")
    for argv in (["bash", script, "--json"], [r.tool, "--json"]):
        steps = set(r.call(argv, env)[1].get("durations") or ())
        if steps != {"fingerprint"}:
            raise SystemExit(f"{argv}: not answered from the fingerprint alone: {sorted(steps)}")
    samples: Dict[str, List[float]] = {name: [] for name in calls}
    say(f"{r.args.runs} interleaved rounds of {len(calls)} calls from {top}")
    for _ in range(r.args.runs):
        for name, (argv, call_env) in calls.items():
            samples[name].append(r.call(argv, call_env, want_json=False)[0])
    floor = median(samples["floor: python3 -c pass"])
    seed_time = median(samples["the seed's script on the same tree"])
    rows = []
    for name, values in samples.items():
        med = median(values)
        goal = result_text = ""
        if name.startswith("GEAK folder"):
            goal = "<= 0.05x the seed's, <= 3x python3 -c pass"
            result_text = (f"{med / seed_time:.3f}x, {med / floor:.1f}x: "
                           f"{'met' if med <= 0.05 * seed_time and med <= 3 * floor else 'MISSED'}")
        elif name.startswith("installed"):
            result_text = f"{med / seed_time:.3f}x, {med / floor:.1f}x"
        rows.append((name, f"{med * 1000:.0f}", f"{min(values) * 1000:.0f}", f"{max(values) * 1000:.0f}",
                     len(values), goal, result_text))
    title = (f"warm call through the GEAK folder: flydsl {REAL_VERSION} wheel + {REAL_PIN} kernels (they import "
             f"torch); python3 = {r.target}\n{describe_machine(r)}; seed: {r.args.seed_script or 'stand-in'}")
    return table(title, ["call", "median ms", "min ms", "max ms", "runs", "goal", "vs seed, vs python3 -c pass"],
                 rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench")
    parser.add_argument("--tool", help="an installed ensure-flydsl to measure (default: this checkout, installed)")
    parser.add_argument("--target-python", help="the interpreter with torch (default: a venv made under --work)")
    parser.add_argument("--base-python", default="python3.11")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--seed-script", help="GEAK's own ensure_flydsl.sh (default: a stand-in of its warm path)")
    r = Runner(parser.parse_args())
    if r.real_repo is None:
        raise SystemExit("set ENSURE_FLYDSL_REAL_REPO to a FlyDSL clone or mirror with tag v0.2.2")
    print(bench(r))


if __name__ == "__main__":
    main()
