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
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers

from tests.helpers.flydsl_fixture import LLVM_HASH_A, counts, make_repo  # noqa: E402

REAL_REPO_VAR = "ENSURE_FLYDSL_REAL_REPO"
REAL_PIN = "v0.2.2"
REAL_VERSION = "0.2.2"
TORCH = "torch==2.13.0"

# Runs in the tool's venv: the cache entry a source-strategy run of REAL_PIN looks up, made from a released
# tree.  The fields are those of ensure_flydsl.providers.cache.tree_fields (which needs a Run); the cache
# publishes only after a source build, and this machine cannot build FlyDSL.
MAKE_ENTRY = r"""
import json, os, sys
from ensure_flydsl.toolchain.environment import file_sha256, llvm_key
from ensure_flydsl.binary_cache.entries import cache_key, open_cache
from ensure_flydsl.providers.cache import repo_identity
from ensure_flydsl.probe.interpreter import describe_interpreter
root, repo, python, commit, location = sys.argv[1:6]
interpreter = describe_interpreter(python, os.environ)
fields = {
    "repo": repo_identity(repo),
    "commit": commit,
    "abi": interpreter.abi,
    "platform": interpreter.platform,
    "build_script": file_sha256(os.path.join(root, "scripts", "build.sh")),
    "mlir": {"llvm": llvm_key(root, interpreter)},
}
key = cache_key("tree", fields)
cache = open_cache(location)
entry = cache.lookup("tree", key)
published = entry is None
if entry is None:
    entry = cache.publish("tree", key, fields, os.path.join(root, "build-fly", "python_packages"))
print(json.dumps({"key": key, "size": entry.size, "files": entry.files, "published": published}))
"""

# Runs in the tool's venv: the cache's fetch of that entry alone (one streaming pass: sha256 of the blob,
# checks of every member, extraction with each file's sha256), without a run around it or the probe after it.
FETCH_ENTRY = r"""
import json, os, shutil, sys, tempfile, time
from ensure_flydsl.binary_cache.entries import open_cache
location, key, work = sys.argv[1:4]
started = time.perf_counter()
cache = open_cache(location)
entry = cache.lookup("tree", key)
folder = tempfile.mkdtemp(dir=work)
cache.fetch(entry, os.path.join(folder, "python_packages"))
seconds = time.perf_counter() - started
shutil.rmtree(folder)
print(json.dumps({"seconds": seconds}))
"""


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


# -- (a) warm call vs full probe ---------------------------------------------------------------------------------
def provisioned_real_root(r: Runner) -> str:
    """The root of (a), provisioned with the release strategy from the wheelhouse (offline) once."""
    root = os.path.join(r.work, "warm", "FlyDSL")
    env = r.real_env(root, "release", **r.offline(os.path.join(r.work, "warm", "pip-cache")))
    os.makedirs(os.path.dirname(root), exist_ok=True)
    seconds, result = r.call([r.tool, "--json"], env)
    say(f"{root}: {result['action']} ({result['how']}, flydsl {result['version']}) in {seconds:.1f} s")
    return root


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


# -- (b) and (c) cold provisioning -------------------------------------------------------------------------------
def cache_entry(r: Runner, released_root: str, cache_dir: str) -> Dict[str, Any]:
    with open(os.path.join(released_root, "flydsl_env.json")) as handle:
        commit = str(json.load(handle)["commit"])
    assert r.real_repo is not None
    out = check([r.tool_python, "-c", MAKE_ENTRY, released_root, r.real_repo, r.target, commit, cache_dir])
    entry: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    say(f"cache entry {str(entry['key'])[:12]}: {mib(float(entry['size']))}, {entry['files']} files "
        f"({'published now' if entry['published'] else 'already there'})")
    return entry


def cold_run(r: Runner, label: str, strategy: str, extra: Dict[str, str]) -> Sample:
    base = r.fresh_base(label)
    root = os.path.join(base, "FlyDSL")
    try:
        seconds, result = r.call([r.tool, "--json"], r.real_env(root, strategy, **extra))
        durations = {str(k): float(v) for k, v in (result.get("durations") or {}).items()}
        expected = "cached" if strategy == "source" else "released"
        if result.get("how") != expected or result.get("version") != REAL_VERSION:
            raise SystemExit(f"{label}: how={result.get('how')} version={result.get('version')}, "
                             f"expected how={expected} version {REAL_VERSION}")
        if strategy == "source":
            with open(os.path.join(base, "ensure_flydsl.log"), errors="replace") as handle:
                log = handle.read()
            built = [step for step in ("llvm", "build") if step in durations]
            if built or "build.sh" in log or os.path.exists(os.path.join(base, "llvm-project")):
                raise SystemExit(f"{label}: the cache-hit run built something ({built}); see {base}")
        return Sample(seconds, durations)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def pip_download(r: Runner) -> Sample:
    """The download alone: `pip download flydsl==X` for the target, from the index, into an empty folder."""
    folder = r.fresh_base("pip-download")
    try:
        env = dict(r.env(), PIP_CACHE_DIR=os.path.join(folder, "pip-cache"))
        seconds = r.call([r.target, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                          "--only-binary=:all:", "-d", os.path.join(folder, "wheels"), f"flydsl=={REAL_VERSION}"],
                         env, want_json=False)[0]
        return Sample(seconds, {})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def cache_fetch_alone(r: Runner, cache_dir: str, key: str) -> Sample:
    started = time.perf_counter()
    out = check([r.tool_python, "-c", FETCH_ENTRY, cache_dir, key, os.path.join(r.work, "runs")])
    seconds = time.perf_counter() - started
    return Sample(seconds, {"cache": float(json.loads(out.strip().splitlines()[-1])["seconds"])})


def bench_cold(r: Runner) -> str:
    wheelhouse, wheel_size = r.wheelhouse()
    released = provisioned_real_root(r)
    tree_size, tree_files = folder_size(os.path.join(released, "build-fly", "python_packages"))
    cache_dir = os.path.join(r.work, "cache")
    entry = cache_entry(r, released, cache_dir)
    pip_caches = os.path.join(r.work, "runs", "pip-caches")
    shutil.rmtree(pip_caches, ignore_errors=True)
    samples: Dict[str, List[Sample]] = {"index": [], "download": [], "offline": [], "cache": [], "fetch": []}
    say(f"(b) {r.args.download_runs} round(s) from the package index (network): a release run, `pip download`")
    for i in range(r.args.download_runs):
        pip_cache = os.path.join(pip_caches, f"empty-{i}")  # pip here caches nothing from the index anyway
        samples["index"].append(cold_run(r, "index", "release", {"PIP_CACHE_DIR": pip_cache}))
        samples["download"].append(pip_download(r))
    say(f"(b)+(c) {r.args.runs} interleaved rounds: release offline from the wheelhouse, cache hit, fetch alone")
    for i in range(r.args.runs):
        offline_cache = os.path.join(pip_caches, f"offline-{i}")
        samples["offline"].append(cold_run(r, "offline", "release", r.offline(offline_cache)))
        samples["cache"].append(cold_run(r, "cache", "source", {"FLYDSL_CACHE": cache_dir}))
        samples["fetch"].append(cache_fetch_alone(r, cache_dir, str(entry["key"])))
    shutil.rmtree(pip_caches, ignore_errors=True)

    def wall(kind: str) -> float:
        return median([s.seconds for s in samples[kind]])

    def step(kind: str, *names: str) -> str:
        return f"{median([s.steps(*names) for s in samples[kind]]):.2f}"

    rows = []
    for kind, name, goal in (
        ("index", "(b) release, wheel from the index (empty pip cache)", "<= 15 s + download"),
        ("offline", "(b) release, offline from a wheelhouse (PIP_NO_INDEX=1)", "<= 15 s"),
        ("cache", "(c) cache hit, FLYDSL_STRATEGY=source", "<= 5 s incl. verification"),
        ("download", "the download alone: pip download flydsl==0.2.2", ""),
        ("fetch", "the cache fetch alone (copy, hashes, extraction)", ""),
    ):
        runs = samples[kind]
        if not runs:
            continue
        totals = [s.seconds for s in runs]
        med = median(totals)
        met = ""
        if kind == "index" and samples["download"]:
            met = verdict(med - wall("download") <= 15.0)
        elif kind == "offline":
            met = verdict(med <= 15.0)
        elif kind == "cache":
            met = verdict(med <= 5.0)
        elif kind == "download" and samples["offline"]:
            met = f"index row - offline row = {wall('index') - wall('offline'):.2f} s"
        elif kind == "fetch":
            met = "artifact s: Cache.fetch in-process"
        steps = ("-", step(kind, "cache"), "-", "-") if kind == "fetch" else ("-", "-", "-", "-")
        if kind in ("index", "offline", "cache"):
            known = ("fetch", "release", "cache", "verify")
            other = median([s.seconds - s.steps(*known) for s in runs])
            steps = (step(kind, "fetch"), step(kind, "release", "cache"), step(kind, "verify"), f"{other:.2f}")
        rows.append((name, f"{med:.2f}", f"{min(totals):.2f}", f"{max(totals):.2f}", *steps, len(totals), goal,
                     met))
    wheel = os.path.basename(glob.glob(os.path.join(wheelhouse, "*.whl"))[0])
    title = (f"(b)+(c) cold provisioning of {REAL_PIN} into a fresh root (git fetch from {r.real_repo}); "
             f"wheel {wheel}: {mib(wheel_size)} download, installed tree {mib(tree_size)} in {tree_files} files; "
             f"cache entry {mib(float(entry['size']))} (gzip'd tar)")
    note = ("\nfetch = git fetch + checkout of the pin; artifact = pip install of the wheel, or the cache step "
            "(lookup, copy, sha256 of the blob and of every extracted file, and its import probe); verify = the "
            "import probe after a release install; the (b) goal for the index row is checked on its time minus "
            "the download alone; other = the rest of the wall time "
            "(interpreter start-up, the preflight probes, lock, publish)")
    return table(title, ["path", "median s", "min s", "max s", "fetch s", "artifact s", "verify s", "other s",
                         "runs", "goal", "result"], rows) + note


# -- (d) the MLIR cache across two hosts -------------------------------------------------------------------------
def bench_mlir(r: Runner) -> str:
    python = r.tool_python
    upstream = r.fresh_base("fixture-upstream")
    try:
        repo = make_repo(os.path.join(upstream, "FlyDSL.git"))
        # The MLIR is shared only because both pins name the same LLVM commit; make sure the fixture still does.
        for label in ("dev", "v0.2.3"):
            hash_file = check(["git", "-C", repo.path, "show", f"{repo.commits[label]}:thirdparty/llvm-hash.txt"])
            assert hash_file.strip() == LLVM_HASH_A, (label, hash_file)
        samples: Dict[str, List[float]] = {"A": [], "B cached": [], "B uncached": []}
        llvm_runs: Dict[str, int] = {k: 0 for k in samples}
        build_runs: Dict[str, int] = {k: 0 for k in samples}
        hows: Dict[str, Set[str]] = {k: set() for k in samples}
        say(f"(d) {r.args.runs} rounds: host A builds dev (publishes), host B builds v0.2.3 with and without "
            f"the cache; build_llvm.sh sleeps 4 x {r.args.llvm_sleep} s")

        def host(name: str, pin: str, cache: Optional[str]) -> None:
            base = r.fresh_base("host-" + name.replace(" ", "-"))
            counter = os.path.join(base, "counters")
            os.makedirs(counter)
            extra = {"FLYDSL_ROOT": os.path.join(base, "FlyDSL"), "FLYDSL_REPO": repo.url,
                     "FLYDSL_PIN": repo.commits[pin], "FLYDSL_PYTHON": python, "FLYDSL_STRATEGY": "source",
                     "FIXTURE_COUNTER_DIR": counter, "FIXTURE_LLVM_SLEEP": str(r.args.llvm_sleep),
                     "FIXTURE_BUILD_SLEEP": str(r.args.build_sleep)}
            if cache:
                extra["FLYDSL_CACHE"] = cache
            try:
                seconds, result = r.call([r.tool, "--json"], r.env(**extra))
                samples[name].append(seconds)
                hows[name].add(str(result.get("how")))
                llvm_runs[name] += len(counts(counter, "llvm"))
                build_runs[name] += len(counts(counter, "build"))
            finally:
                shutil.rmtree(base, ignore_errors=True)

        for i in range(r.args.runs):
            cache = os.path.join(r.fresh_base("mlir-cache"), "cache")
            try:
                host("A", "dev", cache)
                order = [("B cached", cache), ("B uncached", None)]
                for name, where in (order if i % 2 == 0 else order[::-1]):
                    host(name, "v0.2.3", where)
            finally:
                shutil.rmtree(os.path.dirname(cache), ignore_errors=True)
    finally:
        shutil.rmtree(upstream, ignore_errors=True)
    labels = {
        "A": "host A: pin dev, cache empty (builds LLVM + FlyDSL, publishes)",
        "B cached": "host B: pin v0.2.3 with the cache (MLIR fetched)",
        "B uncached": "host B: pin v0.2.3 without a cache",
    }
    rows = []
    for name, label in labels.items():
        values = samples[name]
        rows.append((label, f"{median(values):.2f}", f"{min(values):.2f}", f"{max(values):.2f}", llvm_runs[name],
                     build_runs[name], len(values), ",".join(sorted(hows[name]))))
    saved = median(samples["B uncached"]) - median(samples["B cached"])
    llvm_step = 4 * r.args.llvm_sleep
    ok = llvm_runs["B cached"] == 0 and llvm_runs["B uncached"] == len(samples["B uncached"])
    title = (f"(d) a second pin with the same LLVM commit, via the MLIR cache vs without (fixture; LLVM step "
             f"{llvm_step:g} s, FlyDSL step {3 * r.args.build_sleep:g} s)")
    note = (f"\nthe cache saves {saved:.2f} s of host B's {median(samples['B uncached']):.2f} s (LLVM step "
            f"{llvm_step:g} s); build_llvm.sh skipped by every cached run: {verdict(ok)}")
    return table(title, ["run", "median s", "min s", "max s", "build_llvm.sh runs", "build.sh runs", "runs",
                         "how"], rows) + note


# -- main --------------------------------------------------------------------------------------------------------
def describe_machine(r: Runner) -> str:
    try:
        commit = check(["git", "-C", PROJECT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = " (with uncommitted changes)" if check(["git", "-C", PROJECT, "status", "--porcelain", "--",
                                                         "src"]).strip() else ""
    except SystemExit:
        commit, dirty = "?", ""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return (f"{datetime.date.today().isoformat()}, {platform.node()}: {os.cpu_count()} cores, {mem:.0f} GiB, "
            f"{platform.system()} {platform.release()}, ensure-flydsl at {commit}{dirty}")


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
