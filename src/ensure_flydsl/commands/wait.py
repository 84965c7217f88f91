"""``ensure-flydsl wait``: follow the root's run until it ends; heartbeat lines keep a silence detector off.

Returns 0 on success, the failing stage's exit code on failure, 75 if still running at ``--timeout``, 9
if the run died (noticed within a poll interval through its alive lock; the failure marker is written).
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from ..errors import ExitCode
from ..progress import tail_of
from ..report import Reporter, fmt_seconds
from ..runs import RUNNING, SUCCEEDED, RunStore
from ..settings import Settings
from ..util import read_json
from .status import settle, status_data

POLL_S = 0.05


def heartbeat_line(record: Dict[str, object]) -> str:
    now = time.time()
    started = record.get("started")
    elapsed = now - started if isinstance(started, (int, float)) else None
    eta = record.get("eta_s")
    updated = record.get("updated")
    if isinstance(eta, (int, float)) and isinstance(updated, (int, float)):
        eta = max(0.0, eta - (now - updated))
    percent = record.get("percent")
    shown = f" {percent}%" if percent is not None else ""
    return (f"running: step {record.get('step')}{shown}, elapsed {fmt_seconds(elapsed)}, "
            f"ETA {fmt_seconds(eta if isinstance(eta, (int, float)) else None)} "
            f"(run {record.get('run_id')}, pid {record.get('pid')})")


def wait(settings: Settings, reporter: Reporter, *, timeout: Optional[float], heartbeat: float) -> int:
    store = RunStore(settings.root)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    first = store.latest_for(settings.request())
    if first is None:
        return _settled(settings, reporter)
    run_id = str(first["run_id"])
    next_beat = started
    while True:
        record = store.read(run_id)
        if record is None:
            return _settled(settings, reporter)
        record = settle(store, record)
        if record.get("state") != RUNNING:
            return _finished(settings, record, reporter)
        now = time.monotonic()
        if now >= next_beat:
            reporter.say(heartbeat_line(record))
            next_beat = now + heartbeat
        if deadline is not None and now >= deadline:
            reporter.say(f"still running after {fmt_seconds(timeout)}; run `ensure-flydsl wait` again (exit 75)")
            return int(ExitCode.STILL_RUNNING)
        time.sleep(POLL_S)


def _finished(settings: Settings, record: Dict[str, object], reporter: Reporter) -> int:
    if record.get("state") == SUCCEEDED:
        result = record.get("result") or {}
        assert isinstance(result, dict)
        reporter.say(f"succeeded: flydsl {result.get('version')} ({result.get('how')}) for {result.get('python')}; "
                     f"source {result.get('env_file')}")
        return 0
    failure = record.get("failure") or {}
    assert isinstance(failure, dict)
    code = int(failure.get("exit_code") or ExitCode.INTERNAL)
    reporter.say(f"failed (exit {code}) in step {failure.get('stage')}: {failure.get('reason')}")
    marker = read_json(settings.fail_marker) or {}
    tail = marker.get("log_tail") or tail_of(str(record.get("log") or ""))
    if isinstance(tail, list) and tail:
        reporter.say(f"last lines of the log ({record.get('log')}):\n" + "\n".join("    " + str(t) for t in tail))
    return code


def _settled(settings: Settings, reporter: Reporter) -> int:
    """No run to follow: answer from the markers."""
    data = status_data(settings)
    if data["state"] == SUCCEEDED:
        reporter.say(f"succeeded: flydsl {data['version']} ({data['how']}); source {data['env_file']}")
        return 0
    if data["state"] == "failed":
        reporter.say(f"failed (exit {data['exit_code']}) in step {data['stage']}: {data['reason']}")
        code = data["exit_code"]
        return code if isinstance(code, int) else int(ExitCode.INTERNAL)
    reporter.say(f"nothing to wait for: no run for {settings.root}; start one with `ensure-flydsl start`")
    return 1
