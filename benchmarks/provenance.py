"""The release wheel's provenance check on the real ~70 MB flydsl 0.2.2 wheel and the real v0.2.2 checkout.

    ENSURE_FLYDSL_REAL_REPO=/path/to/FlyDSL python benchmarks/provenance.py [--runs 9] [--wheel FILE]

Measures what the release provider does between the download and the install: list the files git tracks
in python/flydsl at the pin (`git ls-tree`) and compare each with flydsl/<path> in the wheel, read as a zip
(`check_provenance`).  The checkout is a temporary clone of ENSURE_FLYDSL_REAL_REPO at v0.2.2; the wheel is
downloaded with pip into a temporary folder unless --wheel names one.  Prints the median of --runs and each run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from ensure_flydsl.layout import FLYDSL_SOURCES as SOURCES
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.ways.release.provider import tracked_sources
from ensure_flydsl.ways.release.wheels import check_provenance


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--wheel", help="the flydsl 0.2.2 wheel (downloaded with pip when not given)")
    args = parser.parse_args()
    repo = os.environ.get("ENSURE_FLYDSL_REAL_REPO")
    if not repo:
        print("ENSURE_FLYDSL_REAL_REPO is not set: nothing to measure")
        return 0
    with tempfile.TemporaryDirectory() as work:
        checkout = os.path.join(work, "FlyDSL")
        subprocess.run(["git", "clone", "-q", "--no-checkout", repo, checkout], check=True)
        subprocess.run(["git", "-C", checkout, "-c", "advice.detachedHead=false", "checkout", "-q", "v0.2.2"],
                       check=True)
        commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], check=True, text=True,
                                stdout=subprocess.PIPE).stdout.strip()
        wheel = args.wheel or download(work)
        seconds = []
        for _ in range(args.runs):
            started = time.perf_counter()
            files = tracked_sources(Checkout(checkout, repo, ()), commit)  # no git mirrors: the checkout is local
            found = check_provenance(wheel, os.path.join(checkout, SOURCES), files)
            seconds.append(time.perf_counter() - started)
            assert found.proven, found.summary()
        size = os.path.getsize(wheel) / 2**20
        print(f"{os.path.basename(wheel)} ({size:.1f} MiB) vs {repo} v0.2.2: {found.summary()}")
        print(f"provenance check (git ls-tree + zip compare): median {statistics.median(seconds) * 1000:.1f} ms "
              f"of {len(seconds)} runs: " + ", ".join(f"{s * 1000:.1f}" for s in seconds))
    return 0


def download(folder: str) -> str:
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "--disable-pip-version-check", "-d", folder, "flydsl==0.2.2"], check=True)
    return os.path.join(folder, next(n for n in os.listdir(folder) if n.endswith(".whl")))


if __name__ == "__main__":
    sys.exit(main())
