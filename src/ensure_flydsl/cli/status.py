"""``ensure-flydsl status``: what is going on for the root, as one stable JSON object or a few lines.

The state is what is true for the request now (see runs/answer.py): a live run for it is "running"; else an
env file that answers it is "succeeded"; else the last run for it that ended, if it failed, is "failed";
else "absent" (with the reason).
"""

from __future__ import annotations

import json
import time
from typing import Dict

from ensure_flydsl.runs.answer import answer
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import fmt_seconds, known

FIELDS = ("state", "step", "percent", "elapsed_s", "eta_s", "pid", "run_id", "version", "root", "python",
          "how", "log", "env_file", "stage", "exit_code", "reason", "waiting_for")


def status_data(settings: Settings) -> Dict[str, object]:
    """A pure query: nothing is written, whatever it finds (a dead run is reported, its watchdog records it)."""
    data: Dict[str, object] = {field: None for field in FIELDS}
    found = answer(settings)
    data.update(state=found.state, root=settings.root, log=settings.log_file, run_id=found.run_id)
    record = found.record
    if record is not None:
        data["pid"] = record.pid
        end = record.finished if record.finished is not None else time.time()
        data["elapsed_s"] = round(end - record.started, 1)
    if found.state == RUNNING and record is not None:
        data.update(step=record.step, percent=record.percent, eta_s=record.remaining_eta(), waiting_for=record.waiting)
    elif found.state == SUCCEEDED and found.twin:
        twin = found.twin
        data.update(version=twin.version, python=twin.python, how=twin.how,
                    env_file=settings.env_file, eta_s=0)
    elif found.state == FAILED and found.failure:
        data.update(stage=found.failure.stage, exit_code=found.failure.exit_code, reason=found.failure.reason)
    else:
        data["reason"] = found.reason
    return data


def status(settings: Settings, *, as_json: bool) -> int:
    data = status_data(settings)
    if as_json:
        print(json.dumps(data, sort_keys=True))
        return 0
    print(f"state:   {data['state']}")
    if data["state"] == RUNNING:
        percent = f" {data['percent']}%" if data["percent"] is not None else ""
        print(f"step:    {known(data['step'], 'starting')}{percent}")
        print(f"elapsed: {fmt_seconds(data['elapsed_s'])}  ETA: {fmt_seconds(data['eta_s'])}")  # type: ignore[arg-type]
        print(f"pid:     {known(data['pid'])} (run {known(data['run_id'])})")
        if isinstance(data["waiting_for"], dict):
            print(f"waiting: for {data['waiting_for'].get('text')} (the build lease in the cache)")
    elif data["state"] == SUCCEEDED:
        print(f"flydsl:  {known(data['version'])} ({known(data['how'])}) for {known(data['python'])}")
        print(f"env:     {known(data['env_file'])}")
    elif data["state"] == FAILED:
        print(f"failed:  exit {known(data['exit_code'])} in step {known(data['stage'])}: {known(data['reason'])}")
    elif data["reason"]:
        print(f"why:     {data['reason']}")
    print(f"root:    {data['root']}")
    print(f"log:     {known(data['log'], 'none yet')}")
    return 0
