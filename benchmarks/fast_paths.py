"""Issue 13's benchmarks for the warm call and the cache hit, each beside the tool before the issue and a floor.

    python benchmarks/fast_paths.py all [--runs 21] [--cache-runs 5] [--cache-mib 256] [--before e52e6f2]
    python benchmarks/fast_paths.py warm|cache ...

warm   `ensure-flydsl` with nothing changed (answered from the fingerprint; checked once per tool with --json),
       interleaved rounds of: `python -c pass` (the tools' interpreter), the tool before (--before, a commit of
       this repository), the tool now (this checkout).  Fixture repository, source strategy, one root per tool.
cache  one cache entry of a fixture tree of --cache-mib MiB (a quarter of each file random, the rest zeros:
       about the real tree's 4:1 gzip ratio), published by the tool now's API; interleaved rounds of
       `Cache.get` alone in a process of its own (before, now), with that process's peak RSS, beside the
       floor `tar -xzf` of the blob; then whole cache hits: a fresh root fetched by `ensure-flydsl` with
       FLYDSL_CACHE (before, now), with the peak RSS of the largest process of the run.

Both tools are installed NOT editable (an editable install adds import overhead) into venvs under --work
(default ~/.cache/ensure-flydsl-bench/fast-paths): `venv-before` from `git archive` of --before, `venv-now`
from this checkout (reinstalled at every start).  Figures are medians of wall times measured from here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from typing import Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers

from tests.helpers.flydsl_fixture import make_repo  # noqa: E402

sys.path.insert(0, HERE)
from common import check, say  # noqa: E402

MIB = 1 << 20
STDLIB = "import argparse, dataclasses, enum, json, typing"
MEASURE = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
seconds = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime,
                  "peak": usage.ru_maxrss * 1024}))
"""
FETCH = """
import os, resource, sys, time
from ensure_flydsl.trees.remote import open_cache
cache = open_cache(sys.argv[1])
entry = [e for e in cache.entries() if e.kind == "tree"][0]
cache.get(entry, sys.argv[2])
"""


def measured(cmd: Sequence[str], env: Dict[str, str]) -> Tuple[float, float, int]:
    """Wall seconds, CPU seconds (all its processes) and the peak RSS (bytes) of the largest process of
    ``cmd``; exits on failure."""
    out = json.loads(check([sys.executable, "-c", MEASURE, *cmd], env=env))
    if out["code"] != 0:
        raise SystemExit(f"failed ({out['code']}): {' '.join(cmd)}")
    return float(out["seconds"]), float(out["cpu"]), int(out["peak"])


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [f"\n{title}\n", "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Tools:
    def __init__(self, args: argparse.Namespace, skip_before: bool = False, extras: str = "") -> None:
        self.args = args
        self.extras = extras  # e.g. "[s3]": installed with each tool
        self.work = os.path.abspath(os.path.expanduser(args.work))
        os.makedirs(self.work, exist_ok=True)
        self.venvs = {} if skip_before else {"before": self._install("before", self._before_source())}
        self.venvs["now"] = self._install("now", PROJECT)

    def _before_source(self) -> str:
        folder = os.path.join(self.work, f"src-{self.args.before}")
        if not os.path.isdir(folder):
            os.makedirs(folder)
            say(f"exporting {self.args.before} into {folder}")
            archive = subprocess.run(["git", "-C", PROJECT, "archive", self.args.before], stdout=subprocess.PIPE,
                                     check=True).stdout
            check(["tar", "-x", "-C", folder], input=archive)
        return folder

    def _install(self, label: str, source: str) -> str:
        venv = os.path.join(self.work, f"venv-{label}")
        fresh = not os.path.exists(os.path.join(venv, "bin", "python"))
        if fresh:
            check([sys.executable, "-m", "venv", venv])
        elif label == "before":
            return venv
        say(f"installing ensure-flydsl from {source} (not editable) into {venv}")
        extra = [] if fresh else ["--no-deps", "--force-reinstall"]
        check([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check", *extra,
               source + self.extras])
        return venv

    def exe(self, label: str) -> str:
        return os.path.join(self.venvs[label], "bin", "ensure-flydsl")

    def python(self, label: str) -> str:
        return os.path.join(self.venvs[label], "bin", "python")

    def env(self, base: str, repo_url: str, pin: str, **extra: str) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
        env.update(FLYDSL_ROOT=os.path.join(base, "FlyDSL"), FLYDSL_REPO=repo_url, FLYDSL_PIN=pin,
                   FLYDSL_PYTHON=sys.executable, FLYDSL_STRATEGY="source", ROCM_PATH=os.path.join(base, "no-rocm"))
        env.update(extra)
        return env


def fixture(work: str) -> Tuple[str, str]:
    upstream = os.path.join(work, "upstream")
    shutil.rmtree(upstream, ignore_errors=True)
    repo = make_repo(upstream)
    return repo.url, repo.commits["dev"]


def bench_warm(t: Tools) -> str:
    url, pin = fixture(t.work)
    envs: Dict[str, Dict[str, str]] = {}
    for label in ("before", "now"):
        base = os.path.join(t.work, f"warm-{label}")
        shutil.rmtree(base, ignore_errors=True)
        envs[label] = t.env(base, url, pin)
        check([t.exe(label)], env=envs[label])
        result = json.loads(check([t.exe(label), "--json"], env=envs[label]).splitlines()[-1])
        if result.get("action") != "warm":
            raise SystemExit(f"the {label} tool's second call was not warm: {result.get('action')}")
    cmds = {"python -c pass": [t.python("now"), "-c", "pass"],
            # What the warm path is built on (argparse for the command line, dataclasses/typing/enum for the
            # settings and the result, json for the twin): the floor of the tool as designed.
            f"python -c '{STDLIB}'": [t.python("now"), "-c", STDLIB],
            "before": [t.exe("before")], "now": [t.exe("now")]}
    times: Dict[str, List[float]] = {name: [] for name in cmds}
    cpu: Dict[str, List[float]] = {name: [] for name in cmds}
    say(f"warm: {t.args.runs} interleaved rounds")
    for i in range(t.args.runs):
        names = list(cmds)
        for name in names[i % len(names):] + names[: i % len(names)]:
            env = envs.get(name, envs["now"])
            used = _children_cpu()
            started = time.perf_counter()
            subprocess.run(cmds[name], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[name].append(time.perf_counter() - started)
            cpu[name].append(_children_cpu() - used)
    floor = statistics.median(times["python -c pass"])
    cpu_floor = statistics.median(cpu["python -c pass"])
    rows = []
    for name, values in times.items():
        med = statistics.median(values)
        cpu_med = statistics.median(cpu[name])
        label = name if name.startswith("python") else f"`ensure-flydsl` warm, {name}"
        rows.append([label, f"{med * 1000:.0f}", f"{min(values) * 1000:.0f}", f"{max(values) * 1000:.0f}",
                     f"{med / floor:.2f}x", f"{cpu_med * 1000:.0f}", f"{cpu_med / cpu_floor:.2f}x"])
    return table(f"warm call ({t.args.runs} interleaved rounds; before = {t.args.before})",
                 ["command", "median ms", "min ms", "max ms", "vs python -c pass", "CPU ms (user+sys)",
                  "CPU vs python -c pass"], rows)


def _children_cpu() -> float:
    """CPU seconds of the finished children: unlike wall time, barely moved by other load on the machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def make_tree(folder: str, total: int, files: int = 32) -> None:
    """``files`` files of total/files bytes: a quarter random, the rest zeros (about 4:1 under gzip)."""
    size = total // files
    for i in range(files):
        sub = os.path.join(folder, "flydsl", "_mlir" if i % 2 else "lib")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"part{i:03d}.bin"), "wb") as handle:
            handle.write(os.urandom(size // 4) + bytes(size - size // 4))


def bench_cache(t: Tools) -> str:
    url, pin = fixture(t.work)
    cache = os.path.join(t.work, "cache")
    shutil.rmtree(cache, ignore_errors=True)
    # Host A builds the pin with a large tree (the fixture's build hook adds the files) and publishes it.
    host_a = os.path.join(t.work, "cache-host-a")
    shutil.rmtree(host_a, ignore_errors=True)
    total = t.args.cache_mib * MIB
    hook = (f'"{sys.executable}" -c "import sys; sys.path.insert(0, \'{HERE}\'); import fast_paths; '
            f'fast_paths.make_tree(sys.argv[1], {total})" "$PKG"')
    say(f"cache: host A builds and publishes a {t.args.cache_mib} MiB tree")
    check([t.exe("now")], env=t.env(host_a, url, pin, FLYDSL_CACHE=cache, FIXTURE_BUILD_HOOK=hook))
    blobs = [os.path.join(cache, "blobs", n) for n in os.listdir(os.path.join(cache, "blobs"))]
    blob = max(blobs, key=os.path.getsize)
    rows: Dict[str, List[Tuple[float, float, int]]] = {}
    runs = os.path.join(t.work, "cache-runs")
    say(f"cache: {t.args.cache_runs} interleaved rounds")
    for i in range(t.args.cache_runs):
        for label in (["before", "now"] if i % 2 == 0 else ["now", "before"]):
            shutil.rmtree(runs, ignore_errors=True)
            os.makedirs(runs)
            rows.setdefault(f"`Cache.get` alone, {label}", []).append(
                measured([t.python(label), "-c", FETCH, cache, os.path.join(runs, "tree")], dict(os.environ)))
            shutil.rmtree(runs)
            os.makedirs(runs)
            rows.setdefault(f"`ensure-flydsl` cache hit (fresh root), {label}", []).append(
                measured([t.exe(label)], t.env(os.path.join(runs, "b"), url, pin, FLYDSL_CACHE=cache)))
        shutil.rmtree(runs)
        os.makedirs(runs)
        rows.setdefault("floor: `tar -xzf` of the blob", []).append(measured(["tar", "-xzf", blob, "-C", runs],
                                                                              dict(os.environ)))
    shutil.rmtree(runs, ignore_errors=True)
    with tarfile.open(blob) as tar:
        files = sum(1 for m in tar if m.isfile())
    out = []
    for name, samples in sorted(rows.items(), key=lambda kv: kv[0]):
        secs = [s for s, _c, _p in samples]
        out.append([name, f"{statistics.median(secs):.2f}", f"{min(secs):.2f}", f"{max(secs):.2f}",
                    f"{statistics.median(c for _s, c, _p in samples):.2f}",
                    f"{max(p for _s, _c, p in samples) / MIB:.0f}"])
    title = (f"cache hit of a {t.args.cache_mib} MiB fixture tree ({files} files, a {os.path.getsize(blob) / MIB:.1f}"
             f" MiB blob; {t.args.cache_runs} interleaved rounds; before = {t.args.before})")
    return table(title, ["command", "median s", "min s", "max s", "median CPU s (user+sys)",
                         "peak RSS MiB (largest process)"], out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=("all", "warm", "cache"))
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench/fast-paths")
    parser.add_argument("--before", default="e52e6f2", help="the commit measured as 'before'")
    parser.add_argument("--runs", type=int, default=21, help="warm call rounds")
    parser.add_argument("--cache-runs", type=int, default=5)
    parser.add_argument("--cache-mib", type=int, default=256)
    args = parser.parse_args()
    tools = Tools(args)
    say(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}")
    if args.which in ("all", "warm"):
        print(bench_warm(tools), flush=True)
    if args.which in ("all", "cache"):
        print(bench_cache(tools), flush=True)
    say(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
