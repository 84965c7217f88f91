"""The ensure run, in the order it happens: check, probe, decide, lock, decide again, provision, verify, publish;
a failure becomes the failure marker before it propagates, and the heartbeat runs around all of it."""

from __future__ import annotations

import contextlib
import time
from typing import List, Mapping, Optional, Tuple, Union

from ensure_flydsl.errors import EnsureError, Stage, disk_full_error, exit_code_of
from ensure_flydsl.pipeline.decide import check_provisionable, decide, decide_again, preflight, stamp_seen
from ensure_flydsl.pipeline.lock import build_lock
from ensure_flydsl.pipeline.provision import provision
from ensure_flydsl.pipeline.publish import publish, record_failure, withdraw_if_untrue, withdraw_stale_markers
from ensure_flydsl.pipeline.warm import try_warm
from ensure_flydsl.probe.gate import same_folder
from ensure_flydsl.result import Action, How, Result
from ensure_flydsl.runs import markers, timings
from ensure_flydsl.runs.answer import marker_sharing
from ensure_flydsl.runs.progress import heartbeat, heartbeat_interval
from ensure_flydsl.settings import Settings, host_id
from ensure_flydsl.support.fields import short_text
from ensure_flydsl.support.processes import unblock_stop_signals
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.version import __version__
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.store import repair_shared_files, shared_files_problem


def ensure(settings: Settings, environ: Mapping[str, str], reporter: Reporter,
           warm_key: Optional[List[str]] = None) -> Tuple[Result, bool]:
    """The answer and whether it was warm: the last success's while nothing changed (kept for ``warm_key``)."""
    result = None if settings.verify else try_warm(settings, environ, warm_key)
    if result is None:
        return ensure_run(Run(settings, reporter, environ, warm_key=warm_key)), False
    return result, True


def ensure_run(run: Run) -> Result:
    try:
        outcome = _outcome(run)
        keep_timing(run, outcome)  # succeeded or failed, before the run's final record and its failure marker
        if isinstance(outcome, Result):
            run.tracker.succeeded(outcome.to_json())
            return outcome
        failure = record_failure(run, outcome)
        if failure is outcome:
            raise outcome
        raise failure from outcome
    finally:
        run.tracker.close()  # last: a waiter that sees the run end finds its final state written


def _outcome(run: Run) -> Union[Result, BaseException]:
    """The run under its heartbeat: its result, or the failure it ended with (an exit goes on up)."""
    try:
        with heartbeat(run.reporter, run.tracker.pulse, heartbeat_interval(run.environ)):
            if run.kind == "detached":
                run.step_name = Stage.STARTING  # what its record says until the probe begins
                run.track()  # a detached worker is visible from its first step
                unblock_stop_signals()  # `start` launched it with them blocked: a SIGTERM now is recorded as one
            return _ensure(run)
    except (SystemExit, GeneratorExit):
        raise
    except OSError as exc:  # a full file system met anywhere: said in its one line before the failure marker
        return disk_full_error(exc, run.step_name) or exc
    except BaseException as exc:
        return exc


def keep_timing(run: Run, outcome: Union[Result, BaseException]) -> None:
    """Keep the run's timing record in the host's folder, its room still reserved (never the run's failure)."""
    ended, facts = time.time(), run.facts
    if isinstance(outcome, Result):
        error, way = None, str(outcome.how if outcome.action == Action.PROVISIONED else outcome.action)
    else:
        error, way = outcome, timings.FAILED
    stage = None if error is None else (error.stage if isinstance(error, EnsureError) else None) or run.step_name
    link_mode = getattr(outcome, "link_mode", None)  # the host store's (None before it, or without one)
    record = timings.TimingRecord(
        run_id=run.run_id, host=host_id(run.environ), root=run.settings.root, kind=run.kind,
        started=max(0.0, ended - run.elapsed()), ended=ended, exit_code=int(exit_code_of(error)), way=way,
        stages=dict(run.durations), stage=stage, route=run.tracker.taken, pin=short_text(run.settings.pin),
        tool=f"ensure-flydsl {__version__}", fetched=dict(facts.fetched), cache=dict(facts.cache),
        link_mode=link_mode if link_mode in timings.LINK_MODES else None, lock_wait_s=run.durations.get(Stage.LOCK),
        lease_wait_s=facts.lease_wait_s,
    )
    timings.keep(run.environ, record)


def _ensure(run: Run) -> Result:
    settings = run.settings
    with run.step(Stage.PROBE):
        # --verify of a good tree writes nothing and takes no lock (as `verify`): its paths are checked below.
        run.interpreter = preflight(settings, run.environ, writes=not settings.verify)
        withdraw_stale_markers(settings, run.say)
        sharing = marker_sharing(settings)  # other roots report to the same failure marker
        if sharing is not None:
            run.say("note: " + "; ".join(sharing))
        damaged = shared_files_problem(run)  # a tree an earlier version hardlinked from the store
        seen = stamp_seen(settings.root)
        decision = decide(run) if damaged is None else Decision(False, damaged)
    if decision.ok:
        result = publish(run, decision, _action(decision, settings.root))
        if result.action != Action.VERIFIED or stamp_seen(settings.root) == seen:
            return result
        # Another run's build (begin_build) took the stamp away after our probe, maybe before we wrote.
        markers.withdraw_env_file(settings.env_file, settings.env_json)
        run.say(f"took away {settings.env_file}: another run began rebuilding the tree in {settings.root} after "
                "this run probed it; deciding again under the lock")
        decision = Decision(False, "another run began rebuilding it")
    check_provisionable(settings, run.environ, decision.reason)
    run.track()
    with contextlib.ExitStack() as held:
        with run.step(Stage.LOCK):
            held.enter_context(
                build_lock(settings.lock_file, timeout=settings.lock_timeout, run_id=run.run_id, say=run.say)
            )
            run.tracker.held_lock()
        run.reporter.open_log(settings.log_file)
        # A concurrent run may have finished while we waited: its fingerprint answers without a probe
        # (sixteen waiters do not probe one after another), else a probe does if the root's stamp changed.
        warm = None if settings.verify or damaged else try_warm(settings, run.environ)
        if warm is None and damaged is None:
            with run.step(Stage.PROBE):
                decision = decide_again(run, decision, seen)
        if warm is not None or decision.ok:
            run.say("another run finished this while we waited for the lock")
            return warm or publish(run, decision, _action(decision, settings.root))
        # Under the lock nobody else publishes: an env file whose tree fails its own request's gate now goes;
        # one that is still true stays until this run's build starts (provision: begin_build).
        if not decision.unprobed:
            withdraw_if_untrue(run, decision)
        if damaged is not None:
            repair_shared_files(run, damaged)
        try:
            return provision(run)
        except EnsureError:
            # No probe spent (the root's stamp named another request): the env file's tree is probed only now,
            # so the previous install answers on if it still passes its gate.
            if decision.unprobed:
                withdraw_if_untrue(run, decision)
            raise


def _action(decision: Decision, root: str) -> Action:
    """A good tree found: the root's own ("verified"), or one elsewhere ("reused")."""
    if decision.how != How.REUSED and same_folder(str(decision.tree), root):
        return Action.VERIFIED
    return Action.REUSED
