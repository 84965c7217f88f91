"""(b) and (c) of provisioning.py: a fresh root provisioned with the release strategy (the wheel from the
package index, or offline from a wheelhouse) and with the source strategy from a cache entry of the real
released tree; the download and the cache fetch alone beside them."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time
from typing import Any, Dict, List

from common import (
    REAL_PIN,
    REAL_VERSION,
    Runner,
    Sample,
    check,
    folder_size,
    median,
    mib,
    provisioned_real_root,
    say,
    table,
    verdict,
)

# Runs in the tool's venv: the cache entry a source-strategy run of REAL_PIN looks up, made from a released
# tree.  The fields are those of ensure_flydsl.ways.cache.provider.tree_fields (which needs a Run); the cache
# publishes only after a source build, and this machine cannot build FlyDSL.
MAKE_ENTRY = r"""
import json, os, sys
from ensure_flydsl.support.files import file_sha256
from ensure_flydsl.source.git import CheckoutFiles
from ensure_flydsl.source.needs import pin_llvm_inputs
from ensure_flydsl.trees.manifest import cache_key
from ensure_flydsl.trees.remote import open_cache
from ensure_flydsl.support.urls import repo_identity
from ensure_flydsl.probe.interpreter import describe_interpreter
root, repo, python, commit, location = sys.argv[1:6]
interpreter = describe_interpreter(python, os.environ)
fields = {
    "repo": repo_identity(repo),
    "commit": commit,
    "abi": interpreter.abi,
    "platform": interpreter.platform,
    "build_script": file_sha256(os.path.join(root, "scripts", "build.sh")),
    "mlir": {"llvm": pin_llvm_inputs(CheckoutFiles(root), os.environ).key(interpreter.abi)},
}
key = cache_key("tree", fields)
cache = open_cache(location)
entry = cache.lookup("tree", key)
published = entry is None
if entry is None:
    entry = cache.put("tree", key, fields, os.path.join(root, "build-fly", "python_packages")).entry
print(json.dumps({"key": key, "size": entry.size, "files": entry.files, "published": published}))
"""

# Runs in the tool's venv: the cache's fetch of that entry alone (one streaming pass: sha256 of the blob,
# checks of every member, extraction with each file's sha256), without a run around it or the probe after it.
FETCH_ENTRY = r"""
import json, os, shutil, sys, tempfile, time
from ensure_flydsl.trees.remote import open_cache
location, key, work = sys.argv[1:4]
started = time.perf_counter()
cache = open_cache(location)
entry = cache.lookup("tree", key)
folder = tempfile.mkdtemp(dir=work)
cache.get(entry, os.path.join(folder, "python_packages"))
seconds = time.perf_counter() - started
shutil.rmtree(folder)
print(json.dumps({"seconds": seconds}))
"""


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
            met = "artifact s: Cache.get in-process"
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
