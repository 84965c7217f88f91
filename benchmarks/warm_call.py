"""(a) of provisioning.py: `ensure-flydsl` on a provisioned real tree, answered from the fingerprint, vs the
full import probe and the floors (interpreter start-up, the bare import)."""

from __future__ import annotations

import os
import shutil
from typing import Dict, List

from common import (
    REAL_PIN,
    REAL_VERSION,
    Runner,
    check,
    folder_size,
    median,
    mib,
    provisioned_real_root,
    say,
    table,
    verdict,
)


def compiled_copy(r: Runner, root: str) -> str:
    """A copy of the tree's Python files, byte-compiled (the release installs with --no-compile and the probe
    writes no bytecode); every other file is a symlink.  Returns its PYTHONPATH."""
    copy = os.path.join(r.work, "warm", "compiled-copy")
    shutil.rmtree(copy, ignore_errors=True)

    def place(src: str, dst: str) -> None:
        if src.endswith(".py"):
            shutil.copy2(src, dst)
        else:
            os.symlink(os.path.realpath(src), dst)

    folders = [os.path.join(root, "kernels"), os.path.join(root, "build-fly", "python_packages")]
    for folder, dest in zip(folders, [os.path.join(copy, "root", "kernels"), os.path.join(copy, "packages")]):
        shutil.copytree(folder, dest, copy_function=place, ignore=shutil.ignore_patterns("__pycache__"))
    check([r.target, "-m", "compileall", "-q", copy])
    return os.pathsep.join([os.path.join(copy, "root"), os.path.join(copy, "packages")])


def bench_warm(r: Runner) -> str:
    root = provisioned_real_root(r)
    env = r.real_env(root, "release")
    first = r.call([r.tool, "--json"], env)[1]
    if set(first.get("durations") or ()) != {"fingerprint"}:
        raise SystemExit(f"the call after provisioning was not answered from the fingerprint: {first}")
    prefix = os.pathsep.join([root, os.path.join(root, "build-fly", "python_packages")])
    compiled = compiled_copy(r, root)
    calls = {
        "ensure-flydsl (warm)": ([r.tool], False),
        "ensure-flydsl --json (warm)": ([r.tool, "--json"], True),
        "ensure-flydsl --verify (full probe)": ([r.tool, "--verify", "--json"], True),
        "ensure-flydsl verify (probe only)": ([r.tool, "verify", "--json"], True),
        "floor: tool interpreter start-up": ([r.tool_python, "-c", "pass"], False),
        "floor: import ensure_flydsl.cli.main": ([r.tool_python, "-c", "import ensure_flydsl.cli.main"], False),
        "floor: bare `import flydsl, kernels.moe_gemm_2stage`": (
            [r.target, "-c", "import flydsl, kernels.moe_gemm_2stage"], False),
        "floor: the same with flydsl's bytecode compiled": (
            [r.target, "-c", "import flydsl, kernels.moe_gemm_2stage"], False),
    }
    samples: Dict[str, List[float]] = {name: [] for name in calls}
    say(f"(a) {r.args.warm_runs} interleaved rounds of {len(calls)} calls on {root}")
    for _ in range(r.args.warm_runs):
        for name, (argv, want_json) in calls.items():
            # As the probe runs it: the tree on PYTHONPATH, no bytecode written (the tree stays as it is).
            call_env = env
            if name.startswith("floor: bare"):
                call_env = dict(env, PYTHONPATH=prefix, PYTHONDONTWRITEBYTECODE="1")
            elif "bytecode" in name:
                call_env = dict(env, PYTHONPATH=compiled, PYTHONDONTWRITEBYTECODE="1")
            seconds, result = r.call(argv, call_env, want_json)
            steps = set(result.get("durations") or ())
            if "(warm)" in name and want_json and steps != {"fingerprint"}:
                raise SystemExit(f"{name}: not answered from the fingerprint alone: {sorted(steps)}")
            if "--verify" in argv and "probe" not in steps:
                raise SystemExit(f"--verify did not probe: {sorted(steps)}")
            if "verify" in argv and result.get("ok") is not True:
                raise SystemExit("`ensure-flydsl verify` did not pass")
            samples[name].append(seconds)
    warm = median(samples["ensure-flydsl --json (warm)"])
    probe = median(samples["ensure-flydsl --verify (full probe)"])
    probe_only = median(samples["ensure-flydsl verify (probe only)"])
    rows = []
    for name, values in samples.items():
        med = median(values)
        goal, met = "", ""
        if "(warm)" in name:
            goal, met = "<= 150 ms", verdict(med <= 0.150)
        elif "verify" in name:
            goal = ">= 8x the warm call"
            met = f"{med / warm:.0f}x: {verdict(med / warm >= 8)}"
        rows.append((name, f"{med * 1000:.0f}", f"{min(values) * 1000:.0f}", f"{max(values) * 1000:.0f}",
                     len(values), goal, met))
    size, files = folder_size(os.path.join(root, "build-fly", "python_packages"))
    title = (f"(a) warm call vs full import probe: flydsl {REAL_VERSION} wheel + {REAL_PIN} kernels, "
             f"build-fly/python_packages {mib(size)} in {files} files; target {r.target}")
    note = (f"\nwarm (--json) {warm * 1000:.0f} ms; full probe {probe / warm:.0f}x slower (--verify), "
            f"{probe_only / warm:.0f}x (verify)")
    return table(title, ["command", "median ms", "min ms", "max ms", "runs", "goal", "result"], rows) + note
