"""The run's timing record (``runs/timings.py``), made from what the run knows when it ends, and kept.

Written by ``ensure_run`` for every run that got past its settings, succeeded or failed, before its final
run record and failure marker (a poller that sees the run end finds its timing too), and while its
reserved room is still held (on a full disk the timing is what goes unwritten, never the marker).  The warm
call (``pipeline/warm.py: try_warm``) writes none; a run that waited for the lock and was then answered by the
fingerprint is a run, and its way is ``warm``.
"""

from __future__ import annotations

import time
from typing import Optional, Union

from ensure_flydsl.errors import EnsureError, Stage, exit_code_of
from ensure_flydsl.layout import host_cache_dir, timings_dir
from ensure_flydsl.result import Action, Result
from ensure_flydsl.runs import timings
from ensure_flydsl.settings import host_id
from ensure_flydsl.support.fields import short_text
from ensure_flydsl.version import __version__
from ensure_flydsl.ways.context import Run


def way_of(result: Optional[Result]) -> str:
    """The way a run took: what its call did, or for a tree it made, where the tree came from."""
    if result is None:
        return timings.FAILED
    if result.action == Action.PROVISIONED:
        return {"built": timings.BUILT, "released": timings.RELEASED, "cached": timings.CACHED}.get(
            str(result.how), timings.REUSED)
    return {Action.WARM: timings.WARM, Action.VERIFIED: timings.VERIFIED}.get(result.action, timings.REUSED)


def timing_record(run: Run, outcome: Union[Result, BaseException]) -> timings.TimingRecord:
    """What ``run`` took, as it ends: with its result, or with a failure."""
    result = outcome if isinstance(outcome, Result) else None
    error = None if isinstance(outcome, Result) else outcome
    ended = time.time()
    stage: Optional[Stage] = None
    if error is not None:
        stage = (error.stage if isinstance(error, EnsureError) else None) or run.step_name
    link_mode = getattr(result, "link_mode", None)  # the host store's (None before it, or without one)
    facts = run.facts
    parsed = ((Stage.parse(name), seconds) for name, seconds in run.durations.items())
    stages = {s: seconds for s, seconds in parsed if s is not None}  # (the keys are stages already)
    return timings.TimingRecord(
        run_id=run.run_id, host=host_id(run.environ), root=run.settings.root, kind=run.kind,
        started=max(0.0, ended - run.elapsed()), ended=ended, exit_code=int(exit_code_of(error)),
        way=way_of(result), stages=stages,
        stage=stage, route=facts.route, pin=short_text(run.settings.pin), tool=f"ensure-flydsl {__version__}",
        fetched=dict(facts.fetched), cache=dict(facts.cache),
        link_mode=link_mode if link_mode in timings.LINK_MODES else None,
        lock_wait_s=run.durations.get(Stage.LOCK), lease_wait_s=facts.lease_wait_s,
    )


def keep_timing(run: Run, outcome: Union[Result, BaseException]) -> None:
    """Write the run's timing record into the host's folder (best effort: never the run's failure)."""
    record = timing_record(run, outcome)
    folder = host_cache_dir(run.environ)
    timings.keep(None if folder is None else timings_dir(folder), record)
