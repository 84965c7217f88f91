"""What is true for one request on one root right now: running, succeeded, failed, or absent.

``status`` and ``wait`` answer from this, and from nothing else.  The rules, in order:

1. running: a run for this request is alive (its alive lock is held), whichever run was started last;
2. succeeded: the env file is there and its JSON twin names this very request;
3. failed: the run for this request that ended last failed.  A run that died or gave up while another run
   for the request was alive (a caller waiting for the lock, killed at its shell's 600 s limit) ended
   before that run did, so it never hides the outcome of the run that did the work;
4. absent: nothing was started for the request, or its success was since replaced (another request's env
   file on the same root, or ``clean``).

A failure marker counts only when it names this request: sibling roots in one folder share the default
marker path, and one root's failure is not another's.
"""

from __future__ import annotations

import dataclasses
import os
from typing import List, Mapping, Optional

from ensure_flydsl.runs.liveness import record_death, seen_dead
from ensure_flydsl.runs.markers import EnvTwin, answering_twin
from ensure_flydsl.runs.records import FAILED, RUNNING, SUCCEEDED, Failure, RunRecord, RunStore, sibling_roots
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.files import read_json

ABSENT = "absent"


@dataclasses.dataclass
class Answer:
    state: str
    record: Optional[RunRecord] = None  # the live run, or the run whose outcome this is
    twin: Optional[EnvTwin] = None  # the env file's JSON twin, when succeeded
    failure: Optional[Failure] = None  # when failed
    reason: str = ""  # why absent
    run_id: Optional[str] = None  # the run the answer comes from


def live_runs(store: RunStore, request: Mapping[str, object]) -> List[RunRecord]:
    """The runs for ``request`` that are alive, the one holding the build lock first, then the oldest."""
    return _in_speaking_order([r for r in (seen_dead(store, r) for r in store.records_for(request))
                               if r.state == RUNNING])


def _in_speaking_order(live: List[RunRecord]) -> List[RunRecord]:
    return sorted(live, key=lambda r: (not r.locked, r.started))


def answer(settings: Settings, *, record_deaths: bool = False) -> Answer:
    """What is true for the settings' request.  A pure query; with ``record_deaths`` (``wait``), a run
    found dead is also recorded as such and its failure marker written (its watchdog may be gone too)."""
    store = RunStore(settings.root)
    request = settings.request()
    settle = record_death if record_deaths else seen_dead
    records = [settle(store, r) for r in store.records_for(request)]
    live = [r for r in records if r.state == RUNNING]
    if live:
        first = _in_speaking_order(live)[0]
        return Answer(RUNNING, record=first, run_id=first.run_id)
    twin = answering_twin(settings.root, request)
    if twin is not None:
        return Answer(SUCCEEDED, twin=twin)
    ended = [r for r in records if r.state in (SUCCEEDED, FAILED)]
    last = max(ended, key=lambda r: r.finished or 0.0, default=None)
    if last is not None and last.state == FAILED and last.failure is not None:
        return Answer(FAILED, record=last, failure=last.failure, run_id=last.run_id)
    if last is not None:
        return Answer(ABSENT, record=last, run_id=last.run_id, reason=(
            f"run {last.run_id} succeeded for this request, but {settings.env_file} no longer answers it "
            "(a run for another request on this root replaced it, or it was cleaned)"))
    marker = read_json(settings.fail_marker)
    failure = Failure.from_json(marker)
    if marker is not None and failure is not None and marker.get("request") == request:
        run_id = marker.get("run_id")
        return Answer(FAILED, failure=failure, run_id=str(run_id) if run_id else None)
    return Answer(ABSENT, reason=f"nothing was started for this request on {settings.root}")


def roots_sharing_marker(settings: Settings) -> List[str]:
    """The other roots of this folder whose runs report to the same failure marker (the default path,
    ``$(dirname ROOT)/.flydsl_build.failed``, is one file for every root in a folder)."""
    return [other for other in sibling_roots(settings.root)
            if any(r.fail_marker == settings.fail_marker for r in RunStore(other).records())]


def sharing_advice(settings: Settings, sharing: List[str]) -> str:
    shown = ", ".join(sharing[:3]) + (" ..." if len(sharing) > 3 else "")
    name = os.path.basename(settings.root)
    return (f"the root(s) {shown} report to the same failure marker {settings.fail_marker}: a file poller of one "
            f"sees the other's failures; give each root its own, e.g. "
            f"FLYDSL_BUILD_FAILED={os.path.join(settings.base_dir, '.flydsl_build.' + name + '.failed')}")
