"""What an unusable cache adds to a cold source build (issue 19, item 6): tried once per run, not per step.

    python benchmarks/unreachable_cache.py [--runs 3]

Fresh roots of the fixture repository (source strategy, a build of a few seconds), each a separate run of
this checkout's tool, in rounds of: no cache; an S3 cache whose endpoint refuses connections (a closed
port); an S3 cache whose endpoint accepts and closes every connection (a broken proxy), with the number of
connections the run made; a folder cache that is a FIFO-free, link-free empty folder (the floor of a
working cache's misses).  Medians of wall times; every run must exit 0 with a built tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers

from tests.helpers.closing_server import ClosingServer, closed_port  # noqa: E402
from tests.helpers.flydsl_fixture import make_repo  # noqa: E402
from tests.helpers.workspace import Workspace  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="unreachable-cache-")
    repo = make_repo(os.path.join(work, "FlyDSL.git"))
    closer = ClosingServer()
    aws = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"}
    cases: Dict[str, Dict[str, str]] = {
        "no cache": {},
        "S3, endpoint port closed": dict(aws, FLYDSL_CACHE="s3://bucket/p",
                                         AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{closed_port()}"),
        "S3, endpoint closes each connection": dict(aws, FLYDSL_CACHE="s3://bucket/p",
                                                    AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{closer.port}"),
        "folder cache, empty": {"FLYDSL_CACHE": os.path.join(work, "folder-cache")},
    }
    times: Dict[str, List[float]] = {name: [] for name in cases}
    connections: List[int] = []
    serial = 0
    for _round in range(args.runs):
        for name, env in cases.items():
            serial += 1
            ws = Workspace(os.path.join(work, f"base-{serial}"), repo)
            closer.count = 0
            started = time.perf_counter()
            out = ws.run(timeout=600, **env)
            times[name].append(time.perf_counter() - started)
            if out.returncode != 0 or ws.env_twin()["how"] != "built":
                print(f"{name}: exit {out.returncode}\n{out.stderr}", file=sys.stderr)
                return 1
            if "closes each" in name:
                connections.append(closer.count)
            if os.path.isdir(env.get("FLYDSL_CACHE", "/nonexistent")):
                subprocess.run(["rm", "-rf", env["FLYDSL_CACHE"]], check=True)
    print(f"| cache | median wall time, s (of {args.runs}) | connections made |")
    print("|---|---|---|")
    for name in cases:
        made = f"{statistics.median(connections):.0f}" if "closes each" in name else "-"
        print(f"| {name} | {statistics.median(times[name]):.1f} | {made} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
