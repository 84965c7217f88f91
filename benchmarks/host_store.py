"""Issue 28, item 8: the host store, side by side in one run, on the real flydsl 0.2.2 wheel (beside v0.2.2's
kernels, which import torch), before (FLYDSL_STORE=off: every root installs its own tree) and after (one host
store): the first root, a second root of the same pin and interpreter, a pin switched back (A, then B, then A),
the disk the second root adds, and the warm call against `python -c pass`.

Every root is provisioned offline from the wheelhouse (common.py), with the release strategy.  B is the pin
`--pin-b` (default v0.2.3) installed from the package index (A from the wheelhouse); without its wheel no source tree is
built: the row says it was not measured.  Disk is what `du` counts (hardlinked files once) for the root's
folder, before and after the second root.

    export ENSURE_FLYDSL_REAL_REPO=/work/.mirror/ROCm+FlyDSL/repo
    python3 benchmarks/host_store.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from typing import Dict, List, Tuple

from common import REAL_VERSION, Runner, describe_machine, median, say, table


def du(*folders: str) -> int:
    """Bytes on disk of ``folders`` together (a hardlinked file counted once)."""
    out = subprocess.run(["du", "-s", "-B1", "-c", *folders], stdout=subprocess.PIPE, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def one_round(r: Runner, store: str) -> Dict[str, float]:
    """The figures of one round with FLYDSL_STORE=``store`` (fresh roots, a fresh store)."""
    base = r.fresh_base("store-" + ("off" if store == "off" else "on"))
    host_store = store if store == "off" else os.path.join(base, "host-store")
    offline = r.offline(os.path.join(base, "pip-cache"))
    roots = [os.path.join(base, name, "FlyDSL") for name in ("a", "b")]
    # One host per round: its own user's cache folder (the ETA history), never the real one.
    envs = [r.real_env(root, "release", FLYDSL_STORE=host_store, XDG_CACHE_HOME=os.path.join(base, "xdg"),
                       **offline) for root in roots]
    for root in roots:
        os.makedirs(os.path.dirname(root))
    figures: Dict[str, float] = {}
    figures["first root s"] = r.call([r.tool, "--json"], envs[0])[0]
    shared = [os.path.dirname(roots[0])] + ([host_store] if store != "off" else [])
    before = du(*shared)
    seconds, result = r.call([r.tool, "--json"], envs[1])
    figures["second root s"] = seconds
    figures["second root adds MB"] = (du(*shared, os.path.dirname(roots[1])) - before) / 1e6
    figures["first root MB"] = before / 1e6
    figures["link_mode"] = 0.0 if result.get("link_mode") is None else 1.0
    warm = [r.call([r.tool], envs[1], want_json=False)[0] for _ in range(r.args.runs)]
    floor = [r.call([r.target, "-c", "pass"], envs[1], want_json=False)[0] for _ in range(r.args.runs)]
    figures["warm ms"], figures["python -c pass ms"] = median(warm) * 1000, median(floor) * 1000
    back = switched_back(r, envs[0])
    if back is not None:
        figures["pin switched back s"], figures["checkout s"] = back
    shutil.rmtree(base, ignore_errors=True)
    return figures


def switched_back(r: Runner, env: Dict[str, str]) -> "Tuple[float, float] | None":
    """The root at A moved to B, then back to A (each with --exact-pin): A's time and its checkout's."""
    pin_b = r.args.pin_b
    try:
        online = {k: v for k, v in env.items() if k not in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
        # B's wheel from the index; its kernels moved (kernels/moe/), so B is asked for flydsl alone
        r.call([r.tool, "--json", "--exact-pin"], dict(online, FLYDSL_PIN=pin_b, FLYDSL_REQUIRE="flydsl"))
    except SystemExit as exc:
        say(f"the pin {pin_b} could not be installed offline ({str(exc).splitlines()[0]}); no pin-switch figure")
        return None
    seconds, result = r.call([r.tool, "--json", "--exact-pin"], env)
    durations = result.get("durations") or {}
    return seconds, float(durations.get("fetch", 0.0))


def bench(r: Runner) -> str:
    samples: Dict[str, Dict[str, List[float]]] = {"before (FLYDSL_STORE=off)": {}, "after (host store)": {}}
    for _ in range(r.args.rounds):
        for label, store in (("before (FLYDSL_STORE=off)", "off"), ("after (host store)", "")):
            for name, value in one_round(r, store).items():
                samples[label].setdefault(name, []).append(value)
    after, before = samples["after (host store)"], samples["before (FLYDSL_STORE=off)"]
    rows = []
    for name in ("first root s", "second root s", "second root adds MB", "pin switched back s", "checkout s",
                 "warm ms", "python -c pass ms"):
        b, a = before.get(name), after.get(name)
        rows.append((name, f"{median(b):.2f}" if b else "-", f"{median(a):.2f}" if a else "-", _goal(name, after)))
    title = (f"host store: flydsl {REAL_VERSION} wheel + kernels (torch), release strategy offline, "
             f"{r.args.rounds} rounds; python = {r.target}\n{describe_machine(r)}")
    return table(title, ["figure", "before", "after", "target: after"], rows)


def _goal(name: str, after: Dict[str, List[float]]) -> str:
    if name == "second root s" and after.get(name):
        ratio = median(after[name]) / median(after["first root s"])
        return f"<= 0.25x the first: {ratio:.2f}x {'met' if ratio <= 0.25 else 'MISSED'}"
    if name == "second root adds MB" and after.get(name):
        ratio = median(after[name]) / median(after["first root MB"])
        return f"<= 20 % of the first's disk: {ratio * 100:.0f} % {'met' if ratio <= 0.2 else 'MISSED'}"
    if name == "pin switched back s" and after.get(name):
        over = median(after[name]) - median(after["checkout s"])
        return f"< 1 s plus the checkout: {over:.2f} s over {'met' if over < 1 else 'MISSED'}"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench")
    parser.add_argument("--tool", help="an installed ensure-flydsl to measure (default: this checkout, installed)")
    parser.add_argument("--target-python", help="the interpreter with torch (default: a venv made under --work)")
    parser.add_argument("--base-python", default="python3.11")
    parser.add_argument("--runs", type=int, default=5, help="warm calls per round")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pin-b", default="v0.2.3", help="the pin B of the switch A -> B -> A (its release "
                        "must pass the floor 0.2.2)")
    r = Runner(parser.parse_args())
    if r.real_repo is None:
        raise SystemExit("set ENSURE_FLYDSL_REAL_REPO to a FlyDSL clone or mirror with tag v0.2.2")
    print(bench(r))


if __name__ == "__main__":
    main()
