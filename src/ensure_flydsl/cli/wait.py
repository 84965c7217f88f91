"""``ensure-flydsl wait``: follow the root's run until it ends; heartbeat lines keep a silence detector off.

Returns 0 on success, the failing stage's exit code on failure, 75 if still running at ``--timeout``, 9
if the run died (noticed within a poll interval through its alive lock; the failure marker is written).
"""

from __future__ import annotations

import time
from typing import Dict, Optional

from ensure_flydsl.errors import ExitCode
from ensure_flydsl.runs.answer import Answer, answer
from ensure_flydsl.runs.progress import tail_of
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.files import read_json
from ensure_flydsl.support.report import Reporter, fmt_seconds

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
    """Answer from what is true for the request (runs/answer.py), polling while a run for it lives."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    next_beat = started
    while True:
        found = answer(settings)
        if found.state != RUNNING:
            return _finished(settings, found, reporter)
        record = found.record or {}
        now = time.monotonic()
        if now >= next_beat:
            reporter.say(heartbeat_line(record))
            next_beat = now + heartbeat
        if deadline is not None and now >= deadline:
            reporter.say(f"still running after {fmt_seconds(timeout)}; run `ensure-flydsl wait` again (exit 75)")
            return int(ExitCode.STILL_RUNNING)
        time.sleep(POLL_S)


def _finished(settings: Settings, found: Answer, reporter: Reporter) -> int:
    if found.state == SUCCEEDED:
        twin = found.twin or {}
        reporter.say(f"succeeded: flydsl {twin.get('version')} ({twin.get('how')}) for {twin.get('python')}; "
                     f"source {settings.env_file}")
        return 0
    if found.state == FAILED:
        failure = found.failure or {}
        code = failure.get("exit_code")
        code = code if isinstance(code, int) else int(ExitCode.INTERNAL)
        reporter.say(f"failed (exit {code}) in step {failure.get('stage')}: {failure.get('reason')}")
        record = found.record or {}
        log = str(record.get("log") or failure.get("log") or "")
        marker = read_json(settings.fail_marker) or {}
        same_run = marker.get("run_id") == failure.get("run_id")
        tail = (marker.get("log_tail") if same_run else None) or failure.get("log_tail") or tail_of(log)
        if isinstance(tail, list) and tail:
            reporter.say(f"last lines of the log ({log}):\n" + "\n".join("    " + str(t) for t in tail))
        return code
    reporter.say(f"nothing to wait for: {found.reason}; start a run with `ensure-flydsl start`")
    return 1
