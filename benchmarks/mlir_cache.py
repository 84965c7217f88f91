"""(d) of provisioning.py: two "hosts" share one FLYDSL_CACHE; the second pin (same LLVM commit) with the
MLIR fetched from the cache vs without it (the fixture's LLVM step sleeps --llvm-sleep s at each of its 4 steps)."""

from __future__ import annotations

import os
import shutil
from typing import Dict, List, Optional, Set

from common import Runner, check, median, say, table, verdict

from tests.helpers.flydsl_fixture import LLVM_HASH_A, counts, make_repo


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
