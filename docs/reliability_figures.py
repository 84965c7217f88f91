"""The figures of docs/RELIABILITY.md, from running the reliability suites.

    python docs/reliability_figures.py                  # run the suites, print the figures (markdown)
    python docs/reliability_figures.py --update docs/RELIABILITY.md   # and rewrite its generated part
    python docs/reliability_figures.py --from FIGURES.jsonl JUNIT.xml # format an earlier run's records

It runs ``pytest`` on the suites below with RELIABILITY_FIGURES set: each test records what it did (callers,
builds and wall times; each fault injected and where; each bad input and what came of it; fuzz examples) via
tests/helpers/reliability.py, and pytest's JUnit XML says which tests passed.  A fault, a bad input or an example
counts only if its test passed; any failed or skipped test is printed and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from typing import Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
SUITES = ["tests/scenarios/" + name for name in ("test_concurrency.py", "test_kill_stages.py", "test_faults.py",
                                                  "test_disk.py", "test_full_disk.py", "test_bad_input.py",
                                                  "test_security.py")]
# The cache's untrusted data (issue 19): its readers' fuzzers, its scenarios, and the state machine, which
# records what its rules and invariants tried (ENSURE_FLYDSL_SM_EXAMPLES / _STEPS make it longer).
SUITES += ["tests/unit/test_fuzz_cache.py", "tests/scenarios/test_cache_trust.py",
           "tests/scenarios/test_state_machine.py"]
# Issue 26, item 12: the records read for their meaning, and the state machine on a full disk.
SUITES += ["tests/unit/test_readers_meaning.py", "tests/scenarios/test_planted_records.py",
           "tests/scenarios/test_state_machine_disk.py"]
# The host store (issue 42): copies, another user's store, its locks, prune, provenance.
SUITES += ["tests/scenarios/test_host_store.py", "tests/unit/test_host_store_records.py"]
COMMAND = "python docs/reliability_figures.py"
BEGIN, END = "<!-- figures:begin (docs/reliability_figures.py --update) -->", "<!-- figures:end -->"

sys.path.insert(0, TOP)  # for tests.helpers
sys.path.insert(0, os.path.join(TOP, "src"))

Event = Dict[str, object]


def run_suites(figures: str, junit: str) -> int:
    env = dict(os.environ, RELIABILITY_FIGURES=figures)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *SUITES]
    print("+ RELIABILITY_FIGURES=... " + " ".join(cmd[1:]), file=sys.stderr)
    return subprocess.run(cmd, cwd=TOP, env=env, stdout=sys.stderr).returncode  # stdout: the figures only


def read_junit(path: str) -> List[Tuple[str, str, str, float]]:
    """(file, test name, outcome, seconds) of every test case."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = tag
        module = case.get("classname", "").split(".")[-1]
        cases.append((module + ".py", case.get("name", ""), outcome, float(case.get("time") or 0.0)))
    return cases


def read_events(path: str) -> List[Event]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> List[str]:
    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", "\\n")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def faults_from_test_faults(cases: Sequence[Tuple[str, str, str, float]]) -> List[Event]:
    """tests/scenarios/test_faults.py records nothing itself: each of its passed parametrized kills is one fault."""
    from tests.scenarios.test_kill_stages import STAGE_OF_POINT

    found: List[Event] = []
    for module, name, outcome, _seconds in cases:
        if module != "test_faults.py" or outcome != "passed":
            continue
        match = re.match(r"(test_kill_9_\w+)\[(.+)\]$", name)
        if match and match.group(2) in STAGE_OF_POINT:
            how = "at a fresh root" if "each_point" in match.group(1) else "while changing pins"
            found.append({"event": "fault", "stage": STAGE_OF_POINT[match.group(2)], "inside": True,
                          "how": f"kill -9 at {match.group(2)} ({how}; test_faults.py)", "survived": True})
        elif name == "test_kill_9_of_a_detached_worker_at_a_point_is_noticed":
            found.append({"event": "fault", "stage": "fixes", "inside": True, "survived": True,
                          "how": "kill -9 of a detached worker at fixes-applied (test_faults.py)"})
    return found


def figures(events: List[Event], cases: Sequence[Tuple[str, str, str, float]]) -> Tuple[List[str], bool]:
    out: List[str] = []
    bad_cases = [(m, n, o) for m, n, o, _s in cases if o != "passed"]
    ok = not bad_cases
    by: Dict[str, List[Event]] = collections.defaultdict(list)
    for event in events + faults_from_test_faults(cases):
        by[str(event["event"])].append(event)

    per_file: Dict[str, List[float]] = collections.defaultdict(list)
    for module, _name, _outcome, seconds in cases:
        per_file[module].append(seconds)
    out += ["### The suites", ""]
    out += table(["file", "tests", "passed", "seconds"],
                 [(m, len(s), sum(1 for c in cases if c[0] == m and c[2] == "passed"), f"{sum(s):.0f}")
                  for m, s in sorted(per_file.items())])
    out += ["", f"{len(cases)} tests, {len(cases) - len(bad_cases)} passed, "
            f"{sum(1 for c in bad_cases if c[2] == 'skipped')} skipped, "
            f"{sum(1 for c in bad_cases if c[2] != 'skipped')} failed; {sum(c[3] for c in cases):.0f} s in all.", ""]
    for module, name, outcome in bad_cases:
        out.append(f"- **{outcome}**: {module}::{name}")

    out += ["### Load held", ""]
    out += table(["scenario", "callers", "builds (FlyDSL / LLVM)", "failed", "wall time, s",
                  "the one build, s", "last caller back after the build ended, s"],
                 [(e["scenario"], e["callers"], f"{e['builds']} / {e['llvm_builds']}", e["failed"], e["wall_s"],
                   e.get("build_s", "-"), e.get("last_after_build_s", "-")) for e in by["load"]])
    for e in by["load"]:
        if "joined" in e:
            out += ["", f"Of the {e['callers'] // 2} `start` calls, {e['joined']} joined the run and "
                    f"{e['workers_launched']} launched a worker; the first build began "
                    f"{e.get('first_build_after_launch_s', '?')} s after the launch (32 interpreters starting on "
                    f"this machine); the lock file was looked at {e['lock_looks']} times during the run and was "
                    f"always the same file ({e['lock_inodes']} inode, never missing)."]
    out += ["", "Lock waits bounded by FLYDSL_LOCK_TIMEOUT while a real build holds the lock:", ""]
    out += table(["via", "timeout, s", "returned after, s", "exit", "names the holder (pid, host, start time)"],
                 [(e["via"], e["timeout_s"], e.get("waited_s", "-"), e["exit_code"], "yes" if e["names_holder"]
                   else "NO") for e in by["lock_timeout"]])

    out += ["", "### Faults injected and survived", ""]
    stages = ["fetch", "checkout", "fixes", "llvm", "build", "verify", "publish", "cache", "release"]
    faults = by["fault"]
    rows = []
    for stage in stages:
        here = [f for f in faults if f["stage"] == stage]
        if here:
            rows.append((stage, len(here), sum(1 for f in here if f.get("inside")),
                         sum(1 for f in here if f.get("survived"))))
    out += table(["stage", "kill -9 injected", "landed (inside the command, or the point was reached)",
                  "survived (plain rerun succeeded, no success marker for an unfinished tree)"], rows)
    out += ["", f"{len(faults)} kills in all, {sum(1 for f in faults if f.get('survived'))} survived.", ""]
    out += ["Ctrl-C (SIGINT):", ""]
    out += table(["stage", "sent to", "exit", "rerun resumed"],
                 [(e["stage"], e["target"], e["exit_code"], "yes" if e["resumed"] else "NO")
                  for e in by["interrupt"]])
    out += ["", "Damage after success, detected and repaired on the next call:", ""]
    out += table(["damage", "repaired"], [(e["what"], "yes" if e["survived"] else "NO") for e in by["damage"]])
    out += ["", "A full disk:", ""]
    out += table(["where", "exit", "message", "half-published files", "after making room"],
                 [(e["where"], e["exit_code"], e["message"], e["half_published"], e["rerun"]) for e in by["disk"]])

    rows_bad = by["bad_input"] + [dict(e, via="env", kind="symlink", expect="refused", ok=True)
                                  for e in by["bad_input_extra"]]
    refused = [e for e in rows_bad if e["expect"] == "refused"]
    out += ["", "### Bad inputs", ""]
    out += [f"{len(rows_bad)} inputs tried: {len(refused)} bad values, "
            f"{sum(1 for e in refused if e['ok'])} of them refused with exit 64 and one line naming the setting, "
            "nothing created or changed, no command run; "
            f"{sum(1 for e in rows_bad if e['expect'] == 'default')} empty values (the default as a variable, "
            "refused as a flag); "
            f"{sum(1 for e in rows_bad if e['expect'] == 'accepted')} legal odd paths handled end to end; "
            f"{sum(1 for e in rows_bad if e['expect'].startswith('exit '))} legal values that fail later for "
            f"another reason; {sum(1 for e in rows_bad if not e['ok'])} wrong.", ""]
    out += ["Values: `{scratch}` a fresh folder, `{file}` a regular file, `{dir}` a folder, `{dev}` a character "
            "device (like /dev/null), `{ro}` a read-only file system, `{canary}` a file that any code run from "
            "the value would create. Variables go through `ensure`, flags through `start`.", ""]
    out += table(["setting", "kind", "value", "result"],
                 [(e["setting"], e["kind"], repr(e["value"]), e["result"]) for e in rows_bad])
    ok = ok and all(e["ok"] for e in rows_bad)

    out += ["", "### Security", ""]
    for e in by["fuzz"]:
        out.append(f"- Fuzz ({e['what']}): {e['examples']} hypothesis examples, {e['paths']} paths, "
                   f"{e['sourcings']} sourcings, {e['failures']} failures; nothing ran.")
    for e in by["fuzz_reader"]:
        out.append(f"- Fuzz of a reader of the shared cache ({e['what']}): {e['examples']} hypothesis examples, "
                   f"{e['accepted']} read as valid, {e['refused']} refused as documented, {e['exceptions']} "
                   "other exceptions (tests/unit/test_fuzz_cache.py).")
    for e in by["cache_attack"]:
        out.append(f"- Cache entry, {e['attack']}: rejected, {e['written_outside']} files written outside the "
                   f"root, the run {e['run']}.")
    for e in by["modes"]:
        out.append(f"- Under umask {e['umask']}: {e['paths_checked']} paths the tool, its git and its build "
                   f"created (build, detached run, failure, Python API, cache); {e['world_writable']} "
                   "world-writable.")
    for e in by["clean"]:
        out.append(f"- `clean` with {e['foreign_paths']} foreign files and links in and beside the root: "
                   f"{e['foreign_kept']} kept; another root in the same folder intact: "
                   f"{'yes' if e['other_root_intact'] else 'NO'}.")
    out += state_machine(by["state_machine"])
    out += disk_machine(by["state_machine_disk"])
    return out, ok


def state_machine(events: List[Event]) -> List[str]:
    """What the model-based test of the state machine tried: its rules, checks and outcomes."""
    out: List[str] = []
    for e in events:
        stats = e.get("stats")
        if not isinstance(stats, dict):
            continue
        out += ["", "### The state machine (tests/scenarios/test_state_machine.py)", ""]
        out += [f"{e.get('examples')} examples of up to {e.get('steps')} steps ({stats.get('examples', 0)} runs of "
                f"the machine with hypothesis's shrinking), {stats.get('steps', 0)} steps in all; "
                f"{sum(v for k, v in stats.items() if k.startswith('violation:'))} invariant violations.", ""]
        groups = [("rules run", "rule:"), ("checks made", "check:"), ("outcomes of runs", "outcome:"),
                  ("the shared cache: other hosts' runs", "host:"), ("the second user's runs (read-only cache)",
                                                                     "nobody:"),
                  ("`cache list` / `cache prune` over what was planted (exit codes)", "cache:"),
                  ("`ensure --json` through pyenv's shim (exit codes, what answered)", "shim:"),
                  ("violations", "violation:")]
        for title, prefix in groups:
            rows = [(k[len(prefix):], v) for k, v in sorted(stats.items()) if k.startswith(prefix)]
            if rows:
                out += [f"{title}:", ""] + table(["what", "count"], rows) + [""]
    return out


def disk_machine(events: List[Event]) -> List[str]:
    """What the state machine on a full disk tried: each command's exit codes, full or not, and its fills."""
    out: List[str] = []
    for e in events:
        stats = e.get("stats")
        if not isinstance(stats, dict):
            continue
        out += ["", "### The state machine on a full disk (tests/scenarios/test_state_machine_disk.py)", ""]
        out += [f"{e.get('examples')} examples of up to {e.get('steps')} steps ({stats.get('examples', 0)} runs of "
                f"the machine), {stats.get('steps', 0)} steps; the disk filled {stats.get('fill:quiet', 0)} times "
                f"between commands, {stats.get('fill:while_running', 0)} times while a run went on and "
                f"{stats.get('fill:mid_build', 0)} times in the middle of a build; {stats.get('rerun:exit0', 0)} "
                "runs after making room, each exit 0.", ""]
        rows = []
        for key, count in sorted(stats.items()):
            if key.startswith("exit:"):
                parts = key.split(":")
                rows.append((parts[1], parts[2], "full" if len(parts) > 3 else "room", count))
        out += table(["command", "exit", "disk", "count"], rows) + [""]
    return out


def update(doc: str, text: str) -> None:
    with open(doc, encoding="utf-8") as handle:
        current = handle.read()
    if BEGIN not in current or END not in current:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} block")
    head, rest = current.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    with open(doc, "w", encoding="utf-8") as handle:
        handle.write(head + BEGIN + "\n" + text + "\n" + END + tail)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", metavar="DOC", help="rewrite the generated block of DOC")
    parser.add_argument("--from", dest="source", nargs=2, metavar=("FIGURES", "JUNIT"),
                        help="format the records of an earlier run instead of running the suites")
    args = parser.parse_args(argv)
    if args.source:
        figures_path, junit = args.source
        status = 0
    else:
        work = tempfile.mkdtemp(prefix="reliability-")
        figures_path, junit = os.path.join(work, "figures.jsonl"), os.path.join(work, "junit.xml")
        open(figures_path, "w").close()
        status = run_suites(figures_path, junit)
        print(f"records: {figures_path} {junit}", file=sys.stderr)
    lines, ok = figures(read_events(figures_path), read_junit(junit))
    text = "\n".join(lines)
    print(text)
    if args.update:
        update(args.update, text)
    return 0 if ok and status == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

