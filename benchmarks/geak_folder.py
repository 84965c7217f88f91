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
    python3 benchmarks/geak_folder.py [--runs 15] [--seed-script PATH] [--before REV|TOOL]

``--before`` measures the tool before a change in the same rounds: a git revision of this checkout (installed,
not editable, into its own venv under --work) or an installed ``ensure-flydsl``; its GEAK folder is made by its
own ``skill`` command, and both answer warm for the same root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from typing import Dict, List, Optional, Tuple

from common import (
    PROJECT,
    REAL_PIN,
    REAL_VERSION,
    Runner,
    check,
    describe_machine,
    median,
    provisioned_real_root,
    say,
    table,
)

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


def geak_tree(r: Runner, tool: str, name: str = "GEAK") -> Tuple[str, str]:
    """GEAK's top folder with the folder made by ``tool`` (its ``skill`` command) at its place; (top, its script)."""
    top = os.path.join(r.work, "geak", name)
    folder = os.path.join(top, SKILLS, "ensure_flydsl")
    os.makedirs(os.path.join(top, SKILLS, "apply_flydsl_moe_to_vllm"), exist_ok=True)
    args = ["--force"] if os.path.isdir(folder) else []
    check([tool, "skill", folder, *args], env=r.env())
    return top, os.path.join(folder, "ensure_flydsl.sh")


def before_tool(r: Runner, before: str) -> str:
    """The ``ensure-flydsl`` of ``--before``: an installed one as given, or a revision of this checkout installed
    (not editable) into a venv of its own under --work, once per revision."""
    if os.path.isfile(before):
        return os.path.abspath(before)
    rev = check(["git", "-C", PROJECT, "rev-parse", "--short", before]).strip()
    venv = os.path.join(r.work, f"before-venv-{rev}")
    tool = os.path.join(venv, "bin", "ensure-flydsl")
    if not os.path.isfile(tool):
        source = os.path.join(r.work, f"before-src-{rev}")
        shutil.rmtree(source, ignore_errors=True)
        os.makedirs(source)
        say(f"installing ensure-flydsl at {rev} (not editable) into {venv}")
        check(["sh", "-c", 'git -C "$1" archive "$2" | tar -x -C "$3"', "sh", PROJECT, rev, source])
        check([sys.executable, "-m", "venv", "--clear", venv])
        check([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", source])
    return tool


def warm_calls(r: Runner, top: str, script: str, tool: str, env: Dict[str, str],
               label: str) -> Dict[str, Tuple[List[str], Dict[str, str]]]:
    """The GEAK folder's call and the installed tool's, each checked to answer from the fingerprint alone."""
    for argv in (["bash", script, "--json"], [tool, "--json"]):  # both answer from the fingerprint
        result = r.call(argv, env)[1]
        if set(result.get("durations") or ()) not in ({"fingerprint"}, {"probe", "publish"}):
            raise SystemExit(f"{argv}: unexpected steps {result.get('durations')}")
    for argv in (["bash", script, "--json"], [tool, "--json"]):
        steps = set(r.call(argv, env)[1].get("durations") or ())
        if steps != {"fingerprint"}:
            raise SystemExit(f"{argv}: not answered from the fingerprint alone: {sorted(steps)}")
    return {f"GEAK folder: bash ensure_flydsl.sh (warm){label}": (["bash", script], env),
            f"installed tool: ensure-flydsl (warm){label}": ([tool], env)}


def bench(r: Runner) -> str:
    root = provisioned_real_root(r)
    top, script = geak_tree(r, r.tool)
    before: Optional[str] = before_tool(r, r.args.before) if r.args.before else None
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
    calls = warm_calls(r, top, script, r.tool, env, "")
    if before is not None:
        before_top, before_script = geak_tree(r, before, "GEAK-before")
        calls.update(warm_calls(r, before_top, before_script, before, env, ", before"))
        calls.update(warm_calls(r, top, script, r.tool, env, ""))  # each answered warm after the other's call
    calls["the seed's script on the same tree"] = (["bash", seed], dict(env, FLYDSL_ROOT=seed_root))
    calls["floor: python3 -c pass"] = ([r.target, "-c", "pass"], env)
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
            result_text = (f"{med / seed_time:.3f}x, {med / floor:.2f}x: "
                           f"{'met' if med <= 0.05 * seed_time and med <= 3 * floor else 'MISSED'}")
        elif name.startswith("installed"):
            goal = "<= 2.5x python3 -c pass"
            result_text = f"{med / seed_time:.3f}x, {med / floor:.2f}x: {'met' if med <= 2.5 * floor else 'MISSED'}"
        rows.append((name, f"{med * 1000:.0f}", f"{min(values) * 1000:.0f}", f"{max(values) * 1000:.0f}",
                     len(values), goal, result_text))
    title = (f"warm call through the GEAK folder: flydsl {REAL_VERSION} wheel + {REAL_PIN} kernels (they import "
             f"torch); python3 = {r.target}\n{describe_machine(r)}; seed: {r.args.seed_script or 'stand-in'}"
             + (f"; before: {before}" if before else ""))
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
    parser.add_argument("--before", metavar="REV|TOOL", help="also measure the tool before a change, in the same "
                        "rounds: a revision of this checkout (installed into its own venv) or an installed "
                        "ensure-flydsl")
    r = Runner(parser.parse_args())
    if r.real_repo is None:
        raise SystemExit("set ENSURE_FLYDSL_REAL_REPO to a FlyDSL clone or mirror with tag v0.2.2")
    print(bench(r))


if __name__ == "__main__":
    main()
