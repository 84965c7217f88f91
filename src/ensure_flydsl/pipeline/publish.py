"""The files pollers read: stale markers withdrawn first, the env file published last, failures recorded."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Callable

from ensure_flydsl.errors import EnsureError, ExitCode, Stage, exit_code_of, interrupted_by
from ensure_flydsl.layout import tree_folders
from ensure_flydsl.pipeline.warm import fingerprint, keep_warm, result_of
from ensure_flydsl.probe.fingerprint import site_folders, watch_folders
from ensure_flydsl.probe.gate import evaluate, shadowing
from ensure_flydsl.probe.interpreter import broken_user_line, broken_users, probe_modules, run_probe
from ensure_flydsl.result import Action, How, Result
from ensure_flydsl.runs import markers
from ensure_flydsl.runs.liveness import leave_failure_marker
from ensure_flydsl.runs.markers import Failure, installed, installed_line, tail_of
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.root import Stamps, claim_root, is_ours
from ensure_flydsl.support.files import remove_file
from ensure_flydsl.warm import regular_text
from ensure_flydsl.ways.context import Decision, Run


def withdraw_stale_markers(settings: Settings, say: Callable[[str], None]) -> None:
    """Before a run: this root's old failure marker goes, and an env file known to be untrue."""
    markers.withdraw_failure_marker(settings.fail_marker, settings.root)
    if not os.path.exists(settings.env_file):
        return
    twin = markers.read_env_json(settings.env_json)
    if twin is None:
        why = ("it has no JSON twin this version can read (none, a torn one, or another version's) saying which "
               "tree and request it answers")
    elif is_ours(settings.root) and twin.how != How.REUSED and Stamps(settings.root).read("tree") is None:
        why = "the tree it names is not stamped as finished"
    else:
        return
    markers.withdraw_env_file(settings.env_file, settings.env_json)
    say(f"took away {settings.env_file}: {why}")


def withdraw_if_untrue(run: Run, decision: Decision) -> None:
    """Under the lock: the env file goes if its tree fails its own request's gate now."""
    settings = run.settings
    twin = markers.read_env_json(settings.env_json)
    if twin is None or not os.path.exists(settings.env_file):
        return
    require, floor = twin.request.require, twin.request.min_version
    at_root = list(twin.pythonpath_prepend) == tree_folders(settings.root)
    probe, why = decision.probe, None  # the run's own probe, when it probed the env file's tree as the file runs it
    if probe is None and not decision.unprobed and at_root and run.interpreter.executable == twin.python:
        why = decision.reason  # the probe as the env file runs it broke
    elif probe is None or not (at_root and probe.interpreter.executable == twin.python
                               and set(require) <= set(settings.require)):
        try:
            probe = run_probe(twin.python, modules=probe_modules(require), prefix=list(twin.pythonpath_prepend),
                              environ=run.environ, timeout=settings.probe_timeout,
                              timeout_label=settings.label("probe_timeout"))
        except EnsureError as exc:
            probe, why = None, exc.reason
    if probe is not None:
        verdict = evaluate(probe, floor, require)
        why = None if verdict.reusable else verdict.reason
    if why is not None and markers.withdraw_env_file(settings.env_file, settings.env_json):
        run.say(f"took away {settings.env_file}: the tree it names does not pass the probe now ({why})")


def publish(run: Run, decision: Decision, action: Action) -> Result:
    settings = run.settings
    assert decision.probe is not None and decision.tree is not None and decision.verdict is not None
    interp = decision.probe.interpreter
    elapsed = run.elapsed()
    if not os.path.isdir(settings.root):
        os.makedirs(settings.root)
        claim_root(settings.root, created=True, adopted=False)
    # The pin is what the caller asked for: another FlyDSL user it breaks is said, and the run still succeeds.
    conflicts = broken_users(interp.executable, decision.prepend, run.environ, settings.probe_timeout)
    for user in conflicts:
        run.say(broken_user_line(user, decision.probe.version))
    for shadow in shadowing(settings.require):
        run.say(f"warning: {shadow}")
    twin = markers.EnvTwin(
        request=settings.request(), how=decision.how, tree=decision.tree, version=str(decision.probe.version),
        python=interp.executable, python_version=interp.version, abi=interp.abi, commit=decision.commit,
        files=dict(decision.verdict.files), site_dirs=site_folders(interp), fingerprint={},
        watch=watch_folders(settings.root, decision.verdict.files, decision.verdict.folders),
        FLYDSL_ROOT=settings.root, pythonpath_prepend=list(decision.prepend), FLYDSL_SHIM_DIR=settings.shim_dir,
        VLLM_USE_FLYDSL_MOE="1" if settings.vllm_moe else None,
        pin=decision.pin, repo=decision.repo, run_id=run.run_id, built=action == Action.PROVISIONED,
        elapsed_s=round(elapsed, 3), link_mode=decision.link_mode, conflicts=conflicts,
        mlir=run.facts.mlir if decision.how == How.BUILT else None,
    )
    twin = replace(twin, fingerprint=fingerprint(settings, run.environ, twin))
    if twin.mlir is not None:
        run.say(f"mlir: {twin.mlir}")
    there = markers.read_env_json(settings.env_json)
    as_read = markers.EnvTwin.from_json(json.loads(json.dumps(twin.to_json())))  # as it reads back
    with run.step(Stage.PUBLISH):
        if there is not None and as_read is not None and there.answers(as_read) \
                and regular_text(settings.env_file) == twin.exports.text():
            keep_warm(settings, run.environ, run.warm_key, there, twin.fingerprint)
            run.say(f"{settings.env_file} is current")
        else:
            markers.publish_env_file(settings.env_file, settings.env_json, twin, after_twin=lambda written: keep_warm(
                settings, run.environ, run.warm_key, written, twin.fingerprint))
            run.say(f"wrote {settings.env_file}")
        marker = markers.read_failure_marker(settings.fail_marker)
        if marker is not None and marker.request == settings.request():  # written while this run worked: answered
            remove_file(settings.fail_marker)
    return result_of(settings, run.environ, twin, action, durations={str(s): v for s, v in run.durations.items()},
                     run_id=run.run_id, reason=decision.reason, log=run.reporter.log_path, elapsed_s=run.elapsed())


def record_failure(run: Run, exc: BaseException) -> BaseException:
    """Write the failure marker, then the run's FAILED record; the failure to raise (an EnsureError names the run,
    what still holds, and a marker that went unwritten)."""
    code = exit_code_of(exc)
    stage = (exc.stage if isinstance(exc, EnsureError) else None) or run.step_name
    if isinstance(exc, EnsureError):
        reason, hint = exc.reason, exc.hint
    elif code == ExitCode.INTERRUPTED:
        reason, hint = interrupted_by(exc), "run it again: it resumes"
    else:
        reason = f"internal error: {type(exc).__name__}: {exc}"
        hint = "this is a bug in ensure-flydsl; the log has the traceback"
    run.tracker.release()  # the run's reserved room: on a disk that filled, it takes the marker, then the record
    # The last lines that explain the failure: the build's, else the failed command's, else the log's.
    tail = (run.reporter.tail(20) or (exc.detail.splitlines()[-20:] if isinstance(exc, EnsureError) else [])
            or tail_of(run.reporter.log_path or ""))
    settings, failure = run.settings, Failure(stage, int(code), reason, hint)
    unseen = leave_failure_marker(settings.fail_marker, failure, request=settings.request(), run_id=run.run_id,
                                  locked=run.tracker.record.locked, log=run.reporter.log_path, log_tail=tail,
                                  path_env=run.environ.get("PATH"), say=run.say)
    run.tracker.failed(failure)
    if not isinstance(exc, EnsureError):
        if unseen is not None:
            run.say(unseen)
        return exc
    failed = exc if unseen is None else exc.amended(reason=f"{exc.reason}; {unseen}")  # the line a poller waits on
    still = installed(settings.root, settings.request(), run.environ.get("PATH"))
    if still is not None and not still.get("answers"):
        run.say(installed_line(still))
    return failed.of_run(run.run_id, round(run.elapsed(), 3), still)
