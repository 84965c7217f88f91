"""The `[s3]` extra beside boto3 with pip 23.2 (tests/scenarios/test_extras.py): the user's command as it is, and
the same command with the botocore of the newest aiobotocore as a constraint (what the test runs), side by side.

Each round makes two fresh venvs (Python 3.11, pip 23.2) and runs `pip install 'ensure-flydsl[s3]' boto3` in
each, one plain and one with the constraint, in alternating order; it prints the wall time, the resolver's
downloads of boto3 and aiobotocore, and the versions it settled on.  The plain command's time follows the
package index's calendar (boto3 releases daily, aiobotocore every few weeks), so a figure is only for its day.

    python3 benchmarks/extras_resolution.py [--runs 1] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

from common import median, say, table

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)

from tests.scenarios.test_extras import python_311, requirement_of  # noqa: E402


def one(work: str, constraint: Sequence[str]) -> Dict[str, object]:
    venv = os.path.join(work, "venv")
    shutil.rmtree(work, ignore_errors=True)
    subprocess.run([python_311(), "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "pip==23.2"], check=True)
    started = time.monotonic()
    out = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", *constraint,
                          f"{PROJECT}[s3]", "boto3"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=False)
    seconds = time.monotonic() - started
    got = re.findall(r"Successfully installed .*", out.stdout)
    versions = {m.group(1): m.group(2) for m in re.finditer(r"\b(boto3|botocore|aiobotocore|s3fs)-([0-9][^ ]*)",
                                                            got[-1] if got else "")}
    return {"seconds": seconds, "ok": out.returncode == 0,
            "boto3": len(re.findall(r"Downloading boto3-", out.stdout)),
            "aiobotocore": len(re.findall(r"Downloading aiobotocore-", out.stdout)), "versions": versions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "efb-extras"))
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    python = sys.executable
    aiobotocore = requirement_of(python, "s3fs>=2025.5.0", "aiobotocore", tempfile.mkdtemp(dir=args.work))
    botocore = requirement_of(python, f"{aiobotocore},>=2.19.0", "botocore", tempfile.mkdtemp(dir=args.work))
    constraints = os.path.join(args.work, "constraints.txt")
    with open(constraints, "w") as handle:
        handle.write(botocore + "\n")
    say(f"the constraint: {botocore} (the newest aiobotocore's, within s3fs's {aiobotocore})")
    kinds = {"plain": [], "constrained": ["-c", constraints]}
    results: Dict[str, List[Dict[str, object]]] = {k: [] for k in kinds}
    for n in range(args.runs):
        for kind in (list(kinds) if n % 2 == 0 else list(reversed(kinds))):
            say(f"round {n + 1}: {kind}")
            results[kind].append(one(os.path.join(args.work, kind), kinds[kind]))
    rows = []
    for kind, runs in results.items():
        last = runs[-1]
        rows.append([kind, f"{median([float(str(r['seconds'])) for r in runs]):.1f}",
                     "yes" if all(r["ok"] for r in runs) else "NO", last["boto3"], last["aiobotocore"],
                     " ".join(f"{k} {v}" for k, v in sorted(dict(last["versions"]).items()))])  # type: ignore[arg-type]
    print(table("pip 23.2: pip install 'ensure-flydsl[s3]' boto3 (median wall seconds)",
                ["command", "s", "installed", "boto3 wheels read", "aiobotocore wheels read", "versions"], rows))


if __name__ == "__main__":
    main()
