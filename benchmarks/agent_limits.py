"""Issue 18's figures: how long a call that cannot succeed takes to say so, and the release way of a tool
installed with `uv tool install`; issue 25's: how long a working run stays silent, and what its ETA says.

    python benchmarks/agent_limits.py [silent] [hang] [uv] [quiet] [--before bbd0371|none] [--cap 900]
                                      [--silent-step 200] [--work DIR]

silent  a remote that accepts connections and never answers, at the default network silence limit (60 s):
        FLYDSL_REPO pointing at it (a source run of v0.2.2: exit 2 expected), and an S3 cache endpoint
        (AWS_ENDPOINT_URL_S3) pointing at it (the fixture's few-second build then runs without the cache:
        exit 0 expected).  Seconds to the exit and connections the run made.
hang    FLYDSL_PYTHON is a program that never answers, FLYDSL_PROBE_TIMEOUT=3: `start` and `doctor` (exit 64).
uv      ensure-flydsl installed from this checkout with `uv tool install` (no pip in its environment): the time
        of the install, then `ensure` with FLYDSL_PIN=v0.2.2 and the release way against the package index
        (the target interpreter's pip), first with an empty pip cache, then on a second root with it filled.
quiet   a blocking `ensure` of the fixture whose build step prints nothing for --silent-step seconds (GEAK kills
        an agent silent for 180 s), its output in a file as under nohup: the longest gap between two lines and
        the heartbeat lines; the ETAs of the fixture's LLVM step at 25/50/75/100 %; and `start` + `wait` of a
        release run (v0.2.2 under `auto`, the real wheel from a local wheelhouse): the first and the largest
        ETA its heartbeats show.  Each tool with a history folder of its own (XDG_CACHE_HOME), empty.

Each row is one run of the tool before (--before, a commit of this repository; "none" skips it) and of this
checkout, installed into venvs under --work (default ~/.cache/ensure-flydsl-bench/agent-limits).  The
silent rows take minutes each before issue 18 (the repository was given up after about 300 s; the cache was
tried again at each step), so a run still going after --cap seconds is stopped and shown as "> CAP".
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, PROJECT)  # for tests.helpers
sys.path.insert(0, HERE)

from common import check, say, table  # noqa: E402
from fast_paths import Tools, fixture  # noqa: E402

from tests.helpers.release_fixture import download_wheelhouse, make_release_repo  # noqa: E402
from tests.helpers.stall_server import stall_server  # noqa: E402

NEVER_ANSWERS = "#!/bin/sh\nexec sleep 3600\n"


CAP_S = [900.0]  # --cap: a run still going then is stopped (its process group) and shown as "> CAP"


def timed(cmd: Sequence[str], env: Dict[str, str]) -> "tuple[object, object, str]":
    """(exit code, seconds, output); ("-", "> CAP") for a run stopped at the cap."""
    started = time.monotonic()
    proc = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        said, _ = proc.communicate(timeout=CAP_S[0])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        said, _ = proc.communicate()
        return "-", f"> {CAP_S[0]:.0f}", said
    return proc.returncode, f"{time.monotonic() - started:.1f}", said


def labels(tools: Tools) -> List[str]:
    return [label for label in ("before", "now") if label in tools.venvs]


def bench_silent(tools: Tools, work: str) -> str:
    repo_url, pin = fixture(work)
    rows = []
    for label in labels(tools):
        with stall_server("silent") as server:
            base = tempfile.mkdtemp(dir=work, prefix=f"silent-repo-{label}-")
            env = tools.env(base, f"http://127.0.0.1:{server.port}/FlyDSL.git", "v0.2.2")
            code, seconds, _ = timed([tools.exe(label)], env)
            rows.append(["silent repository (FLYDSL_REPO)", label, code, seconds, server.accepted])
        with stall_server("silent") as server:
            base = tempfile.mkdtemp(dir=work, prefix=f"silent-cache-{label}-")
            env = tools.env(base, repo_url, pin, FLYDSL_CACHE="s3://bucket/prefix",
                            AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{server.port}", AWS_ACCESS_KEY_ID="x",
                            AWS_SECRET_ACCESS_KEY="x", AWS_DEFAULT_REGION="us-east-1")
            code, seconds, _ = timed([tools.exe(label)], env)
            rows.append(["silent S3 cache endpoint, then the build", label, code, seconds, server.accepted])
    return table("a remote that never answers (default limit; one run each)",
                 ["what", "tool", "exit", "seconds", "connections"], rows)


def bench_hang(tools: Tools, work: str) -> str:
    repo_url, pin = fixture(work)
    python = os.path.join(work, "never-answers")
    with open(python, "w") as handle:
        handle.write(NEVER_ANSWERS)
    os.chmod(python, 0o755)
    rows = []
    for label in labels(tools):
        for command in ("start", "doctor"):
            base = tempfile.mkdtemp(dir=work, prefix=f"hang-{label}-")
            env = tools.env(base, repo_url, pin, FLYDSL_PYTHON=python, FLYDSL_PROBE_TIMEOUT="3")
            code, seconds, _ = timed([tools.exe(label), command], env)
            rows.append([f"`{command}`, FLYDSL_PYTHON never answers", label, code, seconds])
    return table("an interpreter that never answers (FLYDSL_PROBE_TIMEOUT=3; one run each)",
                 ["what", "tool", "exit", "seconds"], rows)


def bench_uv(work: str) -> str:
    from uv import find_uv_bin

    folder = tempfile.mkdtemp(dir=work, prefix="uv-tool-")
    env = dict(os.environ, UV_TOOL_DIR=os.path.join(folder, "tools"), UV_TOOL_BIN_DIR=os.path.join(folder, "bin"),
               UV_CACHE_DIR=os.path.join(folder, "uv-cache"))
    started = time.monotonic()
    check([find_uv_bin(), "tool", "install", "--quiet", "--python", sys.executable, "--from", PROJECT,
           "ensure-flydsl"], env=env)
    install = time.monotonic() - started
    tool = os.path.join(folder, "bin", "ensure-flydsl")
    no_pip = subprocess.run([os.path.join(folder, "tools", "ensure-flydsl", "bin", "python"), "-c", "import pip"],
                            stderr=subprocess.DEVNULL, check=False).returncode != 0
    wheelhouse = download_wheelhouse(os.path.join(folder, "wheelhouse"))
    repo = make_release_repo(os.path.join(folder, "upstream", "FlyDSL.git"), wheelhouse)
    pip_cache = os.path.join(folder, "pip-cache")
    rows: List[List[object]] = [["`uv tool install` from this checkout", "-", f"{install:.1f}",
                                 "no pip in the tool's environment" if no_pip else "pip present"]]
    for turn in ("first (empty pip cache)", "second root (pip cache filled)"):
        base = os.path.join(folder, turn.split()[0])
        run_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYDSL_", "FIXTURE_", "PIP_"))}
        run_env.update(FLYDSL_ROOT=os.path.join(base, "FlyDSL"), FLYDSL_REPO=repo.url, FLYDSL_PIN="v0.2.2",
                       FLYDSL_STRATEGY="release", FLYDSL_PYTHON=sys.executable, PIP_CACHE_DIR=pip_cache)
        code, seconds, said = timed([tool, "--json"], run_env)
        how = "released" if '"how": "released"' in said else said.strip().splitlines()[-1][:80]
        rows.append([f"`ensure` release v0.2.2, {turn}", code, seconds, how])
    shutil.rmtree(folder, ignore_errors=True)
    return table("the release way, tool installed with `uv tool install` (one run each)",
                 ["what", "exit", "seconds", "result"], rows)


def followed(cmd: Sequence[str], env: Dict[str, str], path: str) -> "tuple[int, List[tuple[float, str]]]":
    """Run ``cmd`` with its stdout in the file ``path`` (stderr with it), and each line with the time it came."""
    lines: List["tuple[float, str]"] = []
    with open(path, "w") as out, open(path) as reading:
        proc = subprocess.Popen(list(cmd), env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True)
        partial = ""
        while True:
            ended = proc.poll() is not None
            partial += reading.read()
            *whole, partial = partial.split("\n")
            lines.extend((time.monotonic(), line) for line in whole)
            if ended:
                return proc.returncode, lines
            time.sleep(0.05)


def longest_gap(lines: List["tuple[float, str]"]) -> float:
    return max((b[0] - a[0] for a, b in zip(lines, lines[1:])), default=0.0)


def bench_quiet(tools: Tools, work: str, silent_s: float) -> str:
    repo_url, pin = fixture(work)
    rows: List[List[object]] = []
    for label in labels(tools):
        base = tempfile.mkdtemp(dir=work, prefix=f"quiet-{label}-")
        env = tools.env(base, repo_url, pin, FIXTURE_BUILD_HOOK=f"sleep {silent_s:g}",
                        XDG_CACHE_HOME=os.path.join(base, "host-cache"))
        code, lines = followed([tools.exe(label)], env, os.path.join(base, "out.txt"))
        beats = [text for _, text in lines if "running: step" in text]
        rows.append([f"blocking `ensure`, output in a file, a build step silent for {silent_s:g} s", label, code,
                     f"{longest_gap(lines):.1f}", len(beats),
                     beats[-1].split("ensure-flydsl: ", 1)[-1].split(" (run ")[0] if beats else "-"])
    silence = table("a build step that prints nothing (one run each)",
                    ["what", "tool", "exit", "longest gap (s)", "heartbeats", "last heartbeat"], rows)
    rows = []
    wheelhouse = download_wheelhouse(os.path.join(work, "wheelhouse"))
    release = make_release_repo(tempfile.mkdtemp(dir=work, prefix="release-upstream-") + "/FlyDSL.git", wheelhouse)
    for label in labels(tools):
        base = tempfile.mkdtemp(dir=work, prefix=f"eta-{label}-")
        env = tools.env(base, repo_url, pin, FIXTURE_LLVM_SLEEP="1", XDG_CACHE_HOME=os.path.join(base, "host-cache"))
        said = check([tools.exe(label)], env=env)
        etas = [line.rsplit("(ETA ", 1)[1].rstrip(")") for line in said.splitlines() if "ensure-flydsl: llvm " in line]
        rows.append(["source build (no history): the LLVM step's ETA at 25/50/75/100 %", label, " ".join(etas)])
        base = tempfile.mkdtemp(dir=work, prefix=f"release-{label}-")
        env = tools.env(base, release.url, "v0.2.2", FLYDSL_STRATEGY="auto", PIP_NO_INDEX="1",
                        PIP_FIND_LINKS=wheelhouse, XDG_CACHE_HOME=os.path.join(base, "host-cache"))
        check([tools.exe(label), "start"], env=env)
        waited = check([tools.exe(label), "wait", "--heartbeat", "0.1"], env=env)  # every step, short ones too
        shown = [line.split("ETA ", 1)[1].split(" ", 1)[0] for line in waited.splitlines() if "running: step" in line]
        known = [e for e in shown if e != "unknown"]
        rows.append(["release v0.2.2 (`start` + `wait`): first ETA, first known, the largest", label,
                     f"{shown[0] if shown else '-'}, {known[0] if known else '-'}, "
                     f"{max(known, key=_seconds_of) if known else '-'}"])
    return silence + "\n" + table("what the ETA says (one run each)", ["what", "tool", "ETAs"], rows)


def _seconds_of(shown: str) -> int:
    """``21m27s`` -> 1287 (``fmt_seconds`` read back)."""
    total, number = 0, ""
    for char in shown:
        if char.isdigit():
            number += char
        else:
            total += int(number or 0) * {"h": 3600, "m": 60, "s": 1}.get(char, 0)
            number = ""
    return total


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="*", choices=("silent", "hang", "uv", "quiet"), default=[])
    parser.add_argument("--work", default="~/.cache/ensure-flydsl-bench/agent-limits")
    parser.add_argument("--before", default="bbd0371", help="the commit measured as 'before', or none")
    parser.add_argument("--cap", type=float, default=900.0, help="seconds after which a run is stopped")
    parser.add_argument("--silent-step", type=float, default=200.0, help="seconds the quiet build step is silent")
    args = parser.parse_args(argv)
    CAP_S[0] = args.cap
    which = args.which or ["silent", "hang", "uv", "quiet"]
    work = os.path.abspath(os.path.expanduser(args.work))
    os.makedirs(work, exist_ok=True)
    say(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}")
    if "silent" in which or "hang" in which or "quiet" in which:
        tools = Tools(argparse.Namespace(work=work, before=args.before), skip_before=args.before == "none",
                      extras="[s3]")
        if "silent" in which:
            print(bench_silent(tools, work), flush=True)
        if "hang" in which:
            print(bench_hang(tools, work), flush=True)
        if "quiet" in which:
            print(bench_quiet(tools, work, args.silent_step), flush=True)
    if "uv" in which:
        print(bench_uv(work), flush=True)
    say(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
