"""How soon a caller learns that a detached run finished or died: `ensure-flydsl wait` vs the seed's poll.

    python benchmarks/notice_latency.py [--runs 5]

For each run, a detached `ensure-flydsl start` builds a FlyDSL-shaped fixture repository (the build takes
about 2 s).  Two observers start together: `ensure-flydsl wait`, and the seed document's poll loop
(`[ -f "$ENV" ] && break; [ -f "$FAIL" ] && break; sleep 10`).  Latency is the time from the run's end
(its record's finish time, or the moment of the kill -9) to the observer returning.  Medians of --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # the project, for tests.helpers

from tests.helpers.flydsl_fixture import make_repo  # noqa: E402

SEED_POLL = r"""
ENV="$1"; FAIL="$2"
for i in $(seq 1 180); do
  [ -f "$ENV" ] && exit 0
  [ -f "$FAIL" ] && exit 1
  sleep 10
done
exit 2
"""


def tool(*args: str) -> List[str]:
    return [sys.executable, "-m", "ensure_flydsl", *args]


def one(repo_url: str, pin: str, work: str, kill: bool) -> Dict[str, Optional[float]]:
    base = tempfile.mkdtemp(dir=work)
    root = os.path.join(base, "FlyDSL")
    env = dict(os.environ, FLYDSL_ROOT=root, FLYDSL_REPO=repo_url, FLYDSL_PIN=pin, FLYDSL_PYTHON=sys.executable,
               FIXTURE_BUILD_SLEEP="10" if kill else "0.7", ROCM_PATH="/nonexistent",
               FIXTURE_COUNTER_DIR=base)
    started = json.loads(subprocess.run(tool("start"), env=env, stdout=subprocess.PIPE, check=True).stdout)
    waiter = subprocess.Popen(tool("wait", "--heartbeat", "600"), env=env, stdout=subprocess.DEVNULL)
    poller = subprocess.Popen(["bash", "-c", SEED_POLL, "seed-poll", os.path.join(root, "flydsl_env.sh"),
                               os.path.join(base, ".flydsl_build.failed")])
    if kill:
        while not os.path.exists(os.path.join(base, "build.started")):
            time.sleep(0.01)
        time.sleep(0.2)
        os.killpg(started["pid"], signal.SIGKILL)
        ended: Optional[float] = time.time()
    notices: Dict[str, Optional[float]] = {}
    for name, proc in (("wait", waiter), ("seed poll (10 s)", poller)):
        proc.wait(timeout=120)
        notices[name] = time.time()
    if not kill:
        record_dir = os.path.join(base, ".ensure_flydsl", "runs", "FlyDSL")
        with open(os.path.join(record_dir, started["run_id"] + ".json")) as handle:
            ended = json.load(handle)["finished"]
    assert ended is not None
    return {name: (t - ended if t is not None else None) for name, t in notices.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        repo = make_repo(os.path.join(work, "upstream", "FlyDSL.git"))
        rows = []
        for label, kill in (("run finished", False), ("worker killed -9", True)):
            samples: Dict[str, List[float]] = {}
            for _ in range(args.runs):
                for name, latency in one(repo.url, repo.commits["dev"], work, kill).items():
                    if latency is not None:
                        samples.setdefault(name, []).append(latency)
            for name, values in samples.items():
                rows.append((label, name, statistics.median(values), max(values), len(values)))
    print(f"{'event':<18} {'observer':<18} {'median s':>9} {'max s':>7} {'runs':>5}")
    for label, name, median, worst, count in rows:
        print(f"{label:<18} {name:<18} {median:9.2f} {worst:7.2f} {count:5d}")
    print("(the seed's own executor writes no marker on kill -9: its poll loop waits out its 1800 s deadline)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
