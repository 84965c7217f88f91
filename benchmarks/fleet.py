"""Issue 12's benchmark: a fleet of hosts that miss one pin at once, with and without the build lease.

    python benchmarks/fleet.py [--hosts 8] [--build-seconds 20] [--store folder|s3] [--baseline REV] [--work DIR]

N "hosts" (N roots, each its own base folder, FLYDSL_HOST_ID naming it) share one FLYDSL_CACHE (a folder,
or a bucket on moto's S3 server) and are started at the same moment on the fixture's uncached pin.  The
fixture's build.sh burns --build-seconds of CPU (a busy loop, one core), so a build costs what it costs
whatever else runs; build_llvm.sh is instant.  "with the lease" is this checkout; "without" is the tool as
it was before the lease (--baseline, default: the parent of the commit that added binary_cache/lease.py),
exported with `git archive` and run from the same interpreter.  Figures: FlyDSL and LLVM builds (the
fixture's counters), CPU seconds of all the hosts' processes and their children (getrusage), and wall
time from the start to the last host's success.  The two variants run one after the other, --rounds times.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers

from tests.helpers.flydsl_fixture import counts, make_repo  # noqa: E402

BURN = ('python3 -c "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass"; '
        'echo "[3/3] burned {s} s of CPU"')


def baseline_source(rev: Optional[str], work: str) -> str:
    """The tool before the lease, as a folder to put on PYTHONPATH."""
    if rev is None:
        added = subprocess.run(["git", "-C", PROJECT, "log", "--diff-filter=A", "--format=%H", "--",
                                "src/ensure_flydsl/binary_cache/lease.py"], stdout=subprocess.PIPE, text=True,
                               check=True).stdout.split()
        if not added:
            raise SystemExit("no commit adds binary_cache/lease.py here; pass --baseline REV")
        rev = added[-1] + "^"
    folder = os.path.join(work, "baseline")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    archive = subprocess.run(["git", "-C", PROJECT, "archive", rev, "src"], stdout=subprocess.PIPE, check=True)
    subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
    return os.path.join(folder, "src")


def host_env(base: str, name: str, repo_url: str, pin: str, cache: str, counter: str,
             extra: Dict[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLYDSL_", "FIXTURE_")) and k not in ("PYTHONPATH", "MLIR_PATH", "ROCM_PATH")}
    env.update({
        "FLYDSL_ROOT": os.path.join(base, name, "FlyDSL"), "FLYDSL_REPO": repo_url, "FLYDSL_PIN": pin,
        "FLYDSL_PYTHON": sys.executable, "FLYDSL_STRATEGY": "source", "FLYDSL_CACHE": cache,
        "FLYDSL_HOST_ID": name, "ROCM_PATH": os.path.join(base, "no-rocm"), "FIXTURE_COUNTER_DIR": counter,
    })
    env.update(extra)
    return env


def fleet_round(label: str, hosts: int, build_s: float, repo_url: str, pin: str, cache: str, work: str,
                extra: Dict[str, str]) -> Dict[str, float]:
    base = os.path.join(work, "runs", uuid.uuid4().hex[:8])
    counter = os.path.join(base, "counters")
    os.makedirs(counter)
    burn = {"FIXTURE_BUILD_HOOK": BURN.format(s=build_s)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    procs = []
    for i in range(hosts):
        env = host_env(base, f"host-{i}", repo_url, pin, cache, counter, dict(extra, **burn))
        procs.append(subprocess.Popen([sys.executable, "-m", "ensure_flydsl"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, start_new_session=True))
    ended: List[float] = []
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit(f"{label}: a host failed with exit {proc.returncode}; see {base}")
        ended.append(time.monotonic() - started)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"builds": len(counts(counter, "build")), "llvm": len(counts(counter, "llvm")), "cpu_s": cpu,
           "wall_s": max(ended)}
    shutil.rmtree(base, ignore_errors=True)
    return row


def open_store(kind: str, work: str) -> tuple:  # type: ignore[type-arg]
    """(a fresh-cache factory, the environment for it, something to stop)."""
    if kind == "folder":
        return (lambda: os.path.join(work, "caches", uuid.uuid4().hex[:8])), {}, None
    import logging

    from tests.helpers.s3_server import S3Server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    server = S3Server().start()

    def fresh() -> str:
        bucket = "fleet-" + uuid.uuid4().hex[:12]
        server.make_bucket(bucket)
        return f"s3://{bucket}/builds"

    env = dict(server.env(), AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    return fresh, env, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--build-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--store", choices=("folder", "s3"), default="folder")
    parser.add_argument("--baseline", default=None, help="git revision of the tool without the lease")
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="ensure-flydsl-fleet-")
    os.makedirs(work, exist_ok=True)
    repo = make_repo(os.path.join(work, "upstream", uuid.uuid4().hex[:8], "FlyDSL.git"))
    pin = repo.commits["dev"]
    baseline = baseline_source(args.baseline, work)
    fresh, store_env, server = open_store(args.store, work)
    variants = {"without the lease": dict(store_env, PYTHONPATH=baseline), "with the lease": dict(store_env)}
    rows: Dict[str, List[Dict[str, float]]] = {name: [] for name in variants}
    try:
        for _ in range(args.rounds):
            for name, extra in variants.items():
                row = fleet_round(name, args.hosts, args.build_seconds, repo.url, pin, fresh(), work, extra)
                print(f"{name}: {row}", flush=True)
                rows[name].append(row)
    finally:
        if server is not None:
            server.stop()
    print(f"\n{args.hosts} hosts at once, one {args.store} cache, build.sh burning {args.build_seconds:g} s of CPU, "
          f"medians of {args.rounds} round(s), {os.cpu_count()} cores\n")
    print("| | FlyDSL builds | LLVM builds | CPU seconds (all hosts) | wall time to the last host's success |")
    print("|---|---|---|---|---|")
    for name, found in rows.items():
        med = {key: statistics.median(r[key] for r in found) for key in ("builds", "llvm", "cpu_s", "wall_s")}
        print(f"| {name} | {med['builds']:g} | {med['llvm']:g} | {med['cpu_s']:.1f} | {med['wall_s']:.1f} s |")


if __name__ == "__main__":
    main()
