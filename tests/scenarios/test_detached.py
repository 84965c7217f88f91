"""Detached runs with real processes: start, wait, status, heartbeats, dead workers, progress."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Tuple

import pytest

from ensure_flydsl.runs.progress import parse_percent
from ensure_flydsl.runs.records import RunState, RunStore
from tests.helpers.result_schema import validate
from tests.helpers.scenario import Barrier, assert_one_tree, wait_for, wait_until
from tests.helpers.workspace import Workspace, said

# A hang guard, not a performance target (benchmarks/ measures how fast these really are).
HANG_GUARD_S = 20.0


def start(ws: Workspace, *args: str, **env: str) -> Dict[str, object]:
    out = ws.run("start", *args, **env)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"run_id", "pid", "log", "state", "joined"} <= set(data)
    validate(data, "start")
    return data


def status(ws: Workspace) -> Dict[str, object]:
    out = ws.run("status", "--json")
    assert out.returncode == 0, out.stderr
    return validate(json.loads(out.stdout), "status")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_start_returns_while_the_build_runs_then_wait_succeeds(ws: Workspace) -> None:
    built = Barrier(ws.counter, "built")  # the build holds, done, until the test has seen the run going
    data = start(ws, FIXTURE_BUILD_HOOK=built.hook)
    assert data["state"] == "running" and data["joined"] is False and data["log"] == ws.log
    assert pid_alive(int(data["pid"]))  # start came back; the worker goes on
    assert status(ws)["state"] == "running"
    built.release()
    out = ws.run("wait", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "succeeded: flydsl 0.2.2 (built)" in out.stdout
    assert_one_tree(ws)


def test_second_start_joins_the_running_one(ws: Workspace) -> None:
    built = Barrier(ws.counter, "built")
    first = start(ws, FIXTURE_BUILD_HOOK=built.hook)
    second = start(ws, FIXTURE_BUILD_HOOK=built.hook)
    assert second["joined"] is True and second["run_id"] == first["run_id"] and second["pid"] == first["pid"]
    built.release()
    assert ws.run("wait", timeout=60).returncode == 0
    assert ws.count("build") == 1


def test_wait_times_out_with_75_then_returns_0(ws: Workspace) -> None:
    built = Barrier(ws.counter, "built")
    start(ws, FIXTURE_BUILD_HOOK=built.hook)
    out = ws.run("wait", "--timeout", "0.5", timeout=30)
    assert out.returncode == 75, out.stdout + out.stderr
    assert "still running after" in out.stdout and "exit 75" in out.stdout
    built.release()
    out = ws.run("wait", "--timeout", "60", timeout=90)
    assert out.returncode == 0, out.stdout


def test_wait_returns_soon_after_the_worker_finishes(ws: Workspace) -> None:
    data = start(ws, FIXTURE_BUILD_SLEEP="0.5")
    waiter = ws.popen("wait")
    store = RunStore(ws.root)
    while store.is_alive(str(data["run_id"])):
        time.sleep(0.005)
    ended = time.monotonic()
    waiter.communicate(timeout=HANG_GUARD_S)
    assert waiter.returncode == 0
    assert time.monotonic() - ended < HANG_GUARD_S


def test_wait_reports_a_failure_with_its_exit_code(ws: Workspace) -> None:
    start(ws, FIXTURE_BUILD_FAIL="1")
    out = ws.run("wait", timeout=60)
    assert out.returncode == 5, out.stdout
    assert "failed (exit 5) in step build" in out.stdout and "fixture build failure" in out.stdout
    assert ws.marker()["exit_code"] == 5
    assert status(ws)["state"] == "failed"


def test_kill_9_of_the_workers_group_is_noticed_and_resumable(ws: Workspace) -> None:
    data = start(ws, FIXTURE_BUILD_SLEEP="30")
    wait_for(os.path.join(ws.counter, "build.started"))
    waiter = ws.popen("wait", "--heartbeat", "60")
    assert waiter.stdout is not None
    first = waiter.stdout.readline()  # the waiter follows the run: its first heartbeat
    assert "running: step build" in first, first
    wait_until("the record names the build's process group",
               lambda: isinstance(getattr(RunStore(ws.root).current(), "build_pgid", None), int))
    record = RunStore(ws.root).current()
    assert record is not None
    build_pgid = record.build_pgid
    assert isinstance(build_pgid, int)
    os.killpg(int(data["pid"]), signal.SIGKILL)
    killed = time.monotonic()
    out, err = waiter.communicate(timeout=HANG_GUARD_S)
    assert waiter.returncode == 9, out + err
    assert time.monotonic() - killed < HANG_GUARD_S
    assert "died without finishing, during step build" in out
    marker = ws.marker()
    assert marker["exit_code"] == 9 and marker["stage"] == "build" and "died without finishing" in str(marker["reason"])
    assert not os.path.exists(ws.env_file)
    # The build (in its own process group) did not outlive the worker: the orphan is stopped.
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        try:
            os.killpg(build_pgid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the orphaned build kept running"
        time.sleep(0.05)
    assert status(ws)["state"] == "failed" and status(ws)["exit_code"] == 9
    again = start(ws)
    assert again["joined"] is False
    assert ws.run("wait", timeout=60).returncode == 0
    assert_one_tree(ws)


def test_a_death_recorded_as_failed_has_its_marker_already(ws: Workspace) -> None:
    """The watchdog writes the failure marker before the FAILED record: a `wait` answers 9 as soon as it reads
    that record, and a poller of the marker must see the death by then (the record was written first, and a
    `wait` under load returned 9 with no marker yet)."""
    data = start(ws, FIXTURE_BUILD_SLEEP="30")
    wait_for(os.path.join(ws.counter, "build.started"))
    store = RunStore(ws.root)
    record = store.current()
    assert record is not None
    os.killpg(int(data["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + HANG_GUARD_S
    while True:  # read as often as the machine lets us: the window was the timing record's write
        seen = store.read(record.run_id)
        if seen is not None and seen.state == RunState.FAILED:
            break
        assert time.monotonic() < deadline, "the watchdog never recorded the death"
    assert os.path.exists(ws.fail_marker), "the run was recorded as failed before its failure marker was written"
    assert ws.marker()["exit_code"] == 9


def test_death_is_noticed_by_file_pollers_without_wait(ws: Workspace) -> None:
    data = start(ws, FIXTURE_BUILD_SLEEP="30")
    wait_for(os.path.join(ws.counter, "build.started"))
    os.killpg(int(data["pid"]), signal.SIGKILL)
    # Nobody runs `wait` or `status`: the run's watchdog writes the marker the seed's poll loop looks for.
    wait_for(ws.fail_marker, timeout=HANG_GUARD_S)
    assert ws.marker()["exit_code"] == 9


def test_a_rebuild_request_never_shows_the_old_env_file_once_its_build_starts(ws: Workspace) -> None:
    """The previous install answers until the run knows its build can start (the pin fetched, its
    requirements there); from then on a poller never sees it again, only the new pin's env file."""
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # the version-only gate would answer v0.2.3 with dev's tree
    assert ws.run().returncode == 0
    assert ws.env_twin()["commit"] == ws.repo.commits["dev"]
    os.unlink(os.path.join(ws.counter, "build.started"))
    seen: List[Tuple[bool, str]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            building = os.path.exists(os.path.join(ws.counter, "build.started"))  # first: then the read
            try:
                with open(ws.env_json) as handle:
                    seen.append((building, json.load(handle)["commit"]))
            except (OSError, ValueError):
                pass
            time.sleep(0.002)

    start(ws, FLYDSL_PIN="v0.2.3", FIXTURE_BUILD_SLEEP="0.3")
    poller = threading.Thread(target=poll)
    poller.start()  # a poller that starts after `start` returned
    try:
        assert ws.run("wait", "--timeout", "60", FLYDSL_PIN="v0.2.3", timeout=90).returncode == 0
    finally:
        stop.set()
        poller.join()
    new = ws.repo.commits["v0.2.3"]
    assert seen and seen[-1][1] == new
    assert all(commit == new for building, commit in seen if building), "the old env file after the build began"
    commits = [commit for _, commit in seen]
    assert commits == sorted(commits, key=lambda c: c == new)  # the old one, then only the new one


def test_heartbeat_cadence(ws: Workspace) -> None:
    start(ws, FIXTURE_BUILD_SLEEP="1", FIXTURE_LLVM_SLEEP="0.5")
    proc = ws.popen("wait", "--heartbeat", "0.5")
    stamps: List[float] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if "running: step" in line:
            stamps.append(time.monotonic())
    proc.wait(timeout=HANG_GUARD_S)
    assert proc.returncode == 0
    assert len(stamps) >= 5
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) < 1.5  # at least every 0.5 s, with room for a busy machine


def test_status_json_in_each_state(ws: Workspace) -> None:
    absent = status(ws)
    assert absent["state"] == "absent" and absent["root"] == ws.root and absent["log"] == ws.log
    # GEAK's string keys (env_file, version, reason) are left out rather than null (GEAK's gate schema).
    fields = {"state", "step", "percent", "elapsed_s", "eta_s", "overdue_s", "pid", "run_id", "root", "python", "how",
              "log", "stage", "exit_code", "waiting_for", "schema_version", "ok", "built", "hint", "installed"}
    assert set(absent) == fields | {"reason"}
    barrier = Barrier(ws.counter, "built")  # build.sh has printed its last "[3/3]" line and holds
    data = start(ws, FIXTURE_BUILD_HOOK=barrier.hook)
    barrier.wait_reached()
    # The run reads the build's output as it comes: its record shows the last line's percent once read.
    wait_until("the record shows the build's [3/3]", lambda: status(ws)["percent"] == 100.0)
    running = status(ws)
    assert set(running) == fields | {"reason"}
    assert running["state"] == "running" and running["step"] == "build" and running["pid"] == data["pid"]
    assert running["run_id"] == data["run_id"] and isinstance(running["elapsed_s"], float)
    assert isinstance(running["eta_s"], float) and running["eta_s"] >= 0
    assert running["exit_code"] == 75 and running["ok"] is False and "env_file" not in running
    barrier.release()
    assert ws.run("wait", timeout=60).returncode == 0
    done = status(ws)
    assert done["state"] == "succeeded" and done["version"] == "0.2.2" and done["how"] == "built"
    assert done["python"] == sys.executable and done["env_file"] == ws.env_file
    ws.env["FLYDSL_EXACT_PIN"] = "1"  # v0.2.3's own tree: dev's 0.2.2 would pass the version-only gate
    start(ws, FLYDSL_PIN="v0.2.3", FIXTURE_BUILD_FAIL="1")
    assert ws.run("wait", FLYDSL_PIN="v0.2.3", timeout=60).returncode == 5
    failed = json.loads(ws.run("status", "--json", FLYDSL_PIN="v0.2.3").stdout)
    assert failed["state"] == "failed" and failed["exit_code"] == 5 and failed["stage"] == "build"
    assert "build.sh exited with 1" in str(failed["reason"])


def test_status_text(ws: Workspace) -> None:
    assert "state:   absent" in ws.run("status").stdout
    assert ws.run().returncode == 0
    text = ws.run("status").stdout
    assert "state:   succeeded" in text and "flydsl:  0.2.2 (built)" in text


def test_start_refuses_bad_input_at_once(ws: Workspace) -> None:
    out = ws.run("start", FLYDSL_JOBS="0")
    assert out.returncode == 64 and out.stderr.startswith("ensure-flydsl: FLYDSL_JOBS='0' is not allowed")
    assert ws.marker()["exit_code"] == 64
    assert ws.run("status", "--json", FLYDSL_JOBS="0").returncode == 64  # status validates settings too


def test_wait_with_nothing_started(ws: Workspace) -> None:
    out = ws.run("wait")
    assert out.returncode == 1 and "nothing to wait for" in out.stdout
    assert ws.run().returncode == 0
    assert ws.run("wait").returncode == 0  # a finished earlier run answers at once


def test_a_plain_wait_follows_the_root_s_run_and_a_wait_for_another_request_names_it(ws: Workspace) -> None:
    """Issue 41, item 5: after `FLYDSL_PIN=v0.2.2 start`, a plain `wait` in the next shell said "nothing was
    started for this request ...; start a run", and following it started a second build."""
    built = Barrier(ws.counter, "built")
    run_id = str(start(ws, FLYDSL_PIN="v0.2.2", FIXTURE_BUILD_HOOK=built.hook)["run_id"])
    request = ("FLYDSL_REPO", "FLYDSL_PIN", "FLYDSL_PYTHON", "FLYDSL_STRATEGY")  # all the workspace sets but the root
    plain = {k: v for k, v in ws.env.items() if k not in request}

    def run(env: Dict[str, str], *args: str) -> "subprocess.CompletedProcess[str]":
        return subprocess.run(ws.cmd(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)

    followed = run(plain, "wait", "--timeout", "0")
    assert followed.returncode == 75 and f"run {run_id}" in followed.stdout, followed.stdout + followed.stderr
    assert json.loads(run(plain, "status", "--json").stdout)["run_id"] == run_id
    other = ws.run("wait", "--timeout", "0")  # the workspace's own pin: another request
    assert other.returncode == 1, other.stdout + other.stderr
    assert (f"nothing to wait for: no run is going for this request on {ws.root}, but run {run_id} (pin v0.2.2) is, "
            f"for another request; `{said('wait --run-id ' + run_id)}` follows it") in other.stdout, other.stdout
    gate = json.loads(ws.run("status", "--json").stdout)
    assert gate["state"] == "absent" and f"wait --run-id {run_id}` follows it" in gate["hint"]
    assert ws.run("wait", "--run-id", run_id, "--timeout", "0").returncode == 75
    built.release()
    assert ws.run("wait", "--run-id", run_id, "--timeout", "60").returncode == 0
    assert run(plain, "wait", "--timeout", "0").returncode == 0  # the root's current run succeeded
    assert ws.count("build") == 1
    for bad in ("20990101-000000-abcdef", "../runs"):
        refused = ws.run("status", "--run-id", bad)
        assert refused.returncode == 64 and refused.stdout == "", refused.stdout + refused.stderr
        assert refused.stderr == (f"ensure-flydsl: --run-id={bad!r} is not allowed: the id of a run on {ws.root}, "
                                  "as `start` printed it\n")


def test_wait_follows_a_blocking_run(ws: Workspace) -> None:
    blocking = ws.popen(FIXTURE_BUILD_SLEEP="1")
    wait_for(os.path.join(ws.counter, "build.started"))
    out = ws.run("wait", timeout=60)
    blocking.communicate(timeout=60)
    assert out.returncode == 0 and blocking.returncode == 0


def test_warm_start_publishes_quickly(ws: Workspace) -> None:
    assert ws.run().returncode == 0
    start(ws)
    assert os.path.exists(ws.env_file)  # a good tree for the same request: the env file stays
    assert ws.run("wait", timeout=60).returncode == 0
    assert ws.count("build") == 1


def test_percent_parsing() -> None:
    assert parse_percent("[12/48] Building CXX object lib/x.cpp.o") == 25.0
    assert parse_percent("  [ 1/ 4] Linking CXX executable bin/mlir-opt") == 25.0
    assert parse_percent("[ 45%] Building CXX object foo.o") == 45.0
    assert parse_percent("[100%] Built target flydsl") == 100.0
    assert parse_percent("[0/0] nothing") is None
    assert parse_percent("-- Configuring done [3/4]") is None
    assert parse_percent("warning: [-Wunused] x") is None


def test_terminal_shows_a_live_progress_line(ws: Workspace) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(ws.cmd(), env={**ws.env, "FIXTURE_BUILD_SLEEP": "0.3"}, stdout=follower,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks: List[bytes] = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(leader)
    text = b"".join(chunks).decode()
    assert proc.returncode == 0
    assert "\r\x1b[K  build " in text and "ETA" in text


def test_json_events(ws: Workspace) -> None:
    out = ws.run("--json", FIXTURE_BUILD_SLEEP="0.2")
    assert out.returncode == 0
    events = [json.loads(line) for line in out.stderr.splitlines()]
    kinds = {e["event"] for e in events}
    assert {"message", "step", "progress"} <= kinds
    steps = [e["step"] for e in events if e["event"] == "step" and e["state"] == "finished"]
    assert steps[-4:] == ["llvm", "build", "verify", "publish"]
    assert json.loads(out.stdout)["how"] == "built"


def test_plain_output_is_time_stamped_lines(ws: Workspace) -> None:
    out = ws.run(FIXTURE_BUILD_SLEEP="0.1")
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith("[") and "] ensure-flydsl: " in line for line in lines)
    assert any("build 100%" in line for line in lines)


@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02, 0.05, 0.1, 0.2])
def test_a_sigterm_at_any_instant_of_a_worker_s_start_is_an_interrupt(ws: Workspace, delay: float) -> None:
    """A SIGTERM in a detached worker's first tenth of a second (before Python installs its handlers) was
    reported as exit 9, "kill -9 / OOM", "pid None": `start` now launches it with the stop signals blocked,
    and it unblocks them once its record can say how it ended."""
    launched = start(ws, FIXTURE_BUILD_SLEEP="1")
    time.sleep(delay)
    os.kill(int(launched["pid"]), signal.SIGTERM)
    done = ws.run("wait", "--timeout", "60")
    assert done.returncode == 130, (delay, done.stdout + done.stderr)
    assert "SIGTERM" in done.stdout + done.stderr and "kill -9" not in done.stdout + done.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 130 and "SIGTERM" in str(marker["reason"]), marker
    assert marker["pid"] == launched["pid"]


def test_a_worker_killed_before_its_record_leaves_a_failure_marker_unasked(ws: Workspace,
                                                                           tmp_path: "os.PathLike[str]") -> None:
    """The worker is killed -9 as it starts (the OOM killer), before it begins its record and its watchdog.  A
    poller of the files alone sees the failure marker within seconds, no `wait` or `status` asked (it saw none:
    only `wait` recorded such a death)."""
    site = os.path.join(str(tmp_path), "site")
    os.makedirs(site)
    with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
        handle.write("import os\nwith open('/proc/self/cmdline', 'rb') as f:\n"
                     "    if b'\\0_worker\\0' in f.read():\n        os.kill(os.getpid(), 9)\n")
    assert start(ws, PYTHONPATH=site)["state"] == "running"
    wait_for(ws.fail_marker, timeout=20)
    assert ws.marker()["exit_code"] == 9 and ws.marker()["stage"] == "starting", ws.marker()
