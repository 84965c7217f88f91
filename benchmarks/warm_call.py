"""The warm call.  As a script (issue 40), the tool before a change beside the tool now, on a root of the tests'
fixture provisioned by each: wall time (median of interleaved rounds), instructions (callgrind) and the tool's
modules imported, beside `python -c pass` of the same interpreter; and the GEAK folder the tool now writes, run as
`bash ensure_flydsl.sh` with that interpreter first on PATH (issue 41: at most 2.5x; wall time only):

    python3 benchmarks/warm_call.py [--before REV|TOOL] [--runs 15] [--work DIR] [--no-callgrind]

Imported by provisioning.py for its (a): `ensure-flydsl` on a provisioned real tree, answered from the
fingerprint, vs the full import probe and the floors (interpreter start-up, the bare import)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

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


# -- before and after, on the tests' fixture ----------------------------------------------------------------------
def instructions(argv: Sequence[str], env: Dict[str, str]) -> Optional[int]:
    """The instructions of the call's own process (callgrind), or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    out = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    found = re.search(r"refs:\s+([\d,]+)", out.stderr)
    return int(found.group(1).replace(",", "")) if found else None


def tool_modules(python: str, argv: Sequence[str], env: Dict[str, str]) -> List[str]:
    out = subprocess.run([python, "-X", "importtime", *argv], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, check=False)
    names = [line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")]
    return [n for n in names if n.split(".")[0] == "ensure_flydsl"]


def interpreter_of(tool: str) -> str:
    with open(tool) as handle:
        first = handle.readline()
    return first[2:].strip() if first.startswith("#!") else sys.executable


def warm_root(tool: str, base: str, repo: object) -> Dict[str, str]:
    """A root of the fixture provisioned by ``tool`` and answered warm once: the environment of its calls."""
    from tests.helpers.workspace import Workspace

    ws = Workspace(base, repo)  # type: ignore[arg-type]
    env = dict(ws.env, XDG_CACHE_HOME=os.path.join(base, "cache"))
    for _ in range(3):
        out = subprocess.run([tool, "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"{tool} failed on the fixture: exit {out.returncode}")
        if set(json.loads(out.stdout).get("durations") or ()) == {"fingerprint"}:
            return env
    raise SystemExit(f"{tool}: the third call was still not answered from the fingerprint")


def compare(args: argparse.Namespace) -> str:
    from common import Runner, describe_machine, median, say, table
    from geak_folder import before_tool

    sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))
    from tests.helpers.flydsl_fixture import make_repo

    r = Runner(argparse.Namespace(work=args.work, tool=None, target_python=None, before=args.before))
    tools = {"before": before_tool(r, args.before), "now": r.tool}
    runs = os.path.join(r.work, "warm-call")
    shutil.rmtree(runs, ignore_errors=True)
    repo = make_repo(os.path.join(runs, "upstream", "FlyDSL.git"))
    envs = {label: warm_root(tool, os.path.join(runs, label, "base"), repo) for label, tool in tools.items()}
    calls: Dict[str, Tuple[List[str], Dict[str, str]]] = {}
    for label, tool in tools.items():
        calls[f"ensure-flydsl, {label}"] = ([interpreter_of(tool), tool], envs[label])
        calls[f"ensure-flydsl --json, {label}"] = ([interpreter_of(tool), tool, "--json"], envs[label])
    # The GEAK folder made by the tool now, run as GEAK's container runs it: its python3 first on PATH.
    folder = os.path.join(runs, "geak", "ensure_flydsl")
    check([tools["now"], "skill", folder])
    script = ["bash", os.path.join(folder, "ensure_flydsl.sh")]
    geak_env = dict(envs["now"], PATH=os.path.dirname(interpreter_of(tools["now"])) + os.pathsep + envs["now"]["PATH"])
    subprocess.run(script, env=geak_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # warm
    calls["GEAK folder: bash ensure_flydsl.sh, now"] = (script, geak_env)
    floor = "python -c pass (the tool's interpreter)"
    calls[floor] = ([interpreter_of(tools["now"]), "-c", "pass"], envs["now"])
    say(f"{args.runs} interleaved rounds of {len(calls)} calls")
    samples: Dict[str, List[float]] = {name: [] for name in calls}
    for _ in range(args.runs):
        for name, (argv, env) in calls.items():
            started = time.perf_counter()
            subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            samples[name].append(time.perf_counter() - started)
    base_ms, base_instr = median(samples[floor]) * 1000, None if args.no_callgrind else instructions(*calls[floor])
    rows = []
    for name, (argv, env) in calls.items():
        ms = median(samples[name]) * 1000
        shell = argv[0] == "bash"  # callgrind would count bash alone; -X importtime is python's
        instr = None if args.no_callgrind or shell else instructions(argv, env)
        mods = "" if name == floor or shell else str(len(tool_modules(argv[0], argv[1:], env)))
        rows.append((name, f"{ms:.1f}", f"{ms / base_ms:.2f}x",
                     "" if instr is None else f"{instr / 1e6:.1f} M",
                     "" if instr is None or base_instr is None else f"{instr / base_instr:.2f}x", mods))
    title = (f"the warm call on a root of the tests' fixture, before ({args.before}) and now, "
             f"{args.runs} interleaved rounds; {describe_machine(r)}")
    return table(title, ["call", "median ms", "vs floor", "instructions", "vs floor", "tool modules"], rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="dfefc26", help="a revision of this checkout, or an installed tool")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--work", default=os.path.join(os.path.expanduser("~"), ".cache", "ensure-flydsl-bench"))
    parser.add_argument("--no-callgrind", action="store_true")
    print(compare(parser.parse_args()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
