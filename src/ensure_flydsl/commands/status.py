"""``ensure-flydsl status``: what is going on for the root, as one stable JSON object or a few lines.

Precedence: a live run is "running"; else an env file that answers this request is "succeeded"; else a
failure marker (or the latest run's record) is "failed"; else "absent".  A run recorded as running whose
alive lock is free died: it is reported (and marked) as failed with exit 9.
"""

from __future__ import annotations

import json
import time
from typing import Dict, Mapping, Optional

from ..markers import read_env_json
from ..progress import kill_build_group, mark_died
from ..report import fmt_seconds
from ..runs import FAILED, RUNNING, SUCCEEDED, RunStore
from ..settings import Settings
from ..util import read_json

FIELDS = ("state", "step", "percent", "elapsed_s", "eta_s", "pid", "run_id", "version", "root", "python",
          "how", "log", "env_file", "stage", "exit_code", "reason")


def current_record(store: RunStore, request: Mapping[str, object]) -> Optional[Dict[str, object]]:
    """The latest run for ``request``, with a dead "running" run turned into a failure (and its marker
    written)."""
    record = store.latest_for(request)
    return settle(store, record) if record else None


def settle(store: RunStore, record: Dict[str, object]) -> Dict[str, object]:
    """A record that says "running" for a run whose alive lock is free: the run died."""
    if record.get("state") == RUNNING and not store.is_alive(str(record["run_id"])):
        record = store.read(str(record["run_id"])) or record  # it may have finished just now
        if record.get("state") == RUNNING:
            kill_build_group(record)
            record = mark_died(store, record)
    return record


def status_data(settings: Settings) -> Dict[str, object]:
    data: Dict[str, object] = {field: None for field in FIELDS}
    data.update(state="absent", root=settings.root, log=settings.log_file)
    record = current_record(RunStore(settings.root), settings.request())
    if record:
        data.update(run_id=record.get("run_id"), pid=record.get("pid"))
        started = record.get("started")
        finished = record.get("finished")
        if isinstance(started, (int, float)):
            end = finished if isinstance(finished, (int, float)) else time.time()
            data["elapsed_s"] = round(end - started, 1)
    if record and record.get("state") == RUNNING:
        eta = record.get("eta_s")
        updated = record.get("updated")
        if isinstance(eta, (int, float)) and isinstance(updated, (int, float)):
            eta = max(0.0, eta - (time.time() - updated))
        data.update(state=RUNNING, step=record.get("step"), percent=record.get("percent"),
                    eta_s=None if eta is None else round(float(eta), 1))  # type: ignore[arg-type]
        return data
    twin = read_env_json(settings.env_json)
    if twin is not None and twin.get("request") == settings.request():
        data.update(state=SUCCEEDED, version=twin.get("version"), python=twin.get("python"), how=twin.get("how"),
                    env_file=settings.env_file, eta_s=0)
        return data
    marker = read_json(settings.fail_marker)
    failure = marker or (record.get("failure") if record and record.get("state") == FAILED else None)
    if isinstance(failure, dict):
        data.update(state=FAILED, stage=failure.get("stage"), exit_code=failure.get("exit_code"),
                    reason=failure.get("reason"))
        if marker and marker.get("run_id"):
            data["run_id"] = marker.get("run_id")
    return data


def status(settings: Settings, *, as_json: bool) -> int:
    data = status_data(settings)
    if as_json:
        print(json.dumps(data, sort_keys=True))
        return 0
    print(f"state:   {data['state']}")
    if data["state"] == RUNNING:
        percent = f" {data['percent']}%" if data["percent"] is not None else ""
        print(f"step:    {data['step']}{percent}")
        print(f"elapsed: {fmt_seconds(data['elapsed_s'])}  ETA: {fmt_seconds(data['eta_s'])}")  # type: ignore[arg-type]
        print(f"pid:     {data['pid']} (run {data['run_id']})")
    elif data["state"] == SUCCEEDED:
        print(f"flydsl:  {data['version']} ({data['how']}) for {data['python']}")
        print(f"env:     {data['env_file']}")
    elif data["state"] == FAILED:
        print(f"failed:  exit {data['exit_code']} in step {data['stage']}: {data['reason']}")
    print(f"root:    {data['root']}")
    print(f"log:     {data['log']}")
    return 0
