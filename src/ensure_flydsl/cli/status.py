"""``status``: what is true for the request now (runs/answer.py); ``wait``: the same once the run ends, or 75 at
``--timeout``, with heartbeats; ``env``: the env file when it answers the request; ``verify``: its full probe."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import replace
from typing import List, Mapping, Optional

from ensure_flydsl.cli import Call
from ensure_flydsl.errors import ExitCode, Stage
from ensure_flydsl.layout import tree_folders
from ensure_flydsl.probe.gate import evaluate
from ensure_flydsl.probe.interpreter import broken_user_line, broken_users, probe_modules, run_probe
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.answer import ABSENT_EXIT, answer, answers, followed, start_hint, status_lines
from ensure_flydsl.runs.markers import EnvTwin, installed, installed_twin, twin_gap
from ensure_flydsl.runs.progress import Pulse
from ensure_flydsl.runs.records import RUNNING
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.report import fmt_seconds, known


def status(call: Call, settings: Settings) -> int:
    """A pure query: nothing is written (a dead run is reported; its watchdog records it)."""
    settings = followed(settings, call.args.run_id)
    data = answer(settings).to_json(settings)
    print(result_json(data) if call.as_json else "\n".join(status_lines(data)))
    return 0


def wait(call: Call, settings: Settings) -> int:
    """Poll while a run for the request lives; a run found dead is recorded here, should its watchdog be gone."""
    settings, reporter, timeout = followed(settings, call.args.run_id), call.reporter, call.args.timeout
    deadline = None if timeout is None else time.monotonic() + timeout
    next_beat = time.monotonic()
    while True:
        found = answer(settings, record_deaths=True)
        if found.state != RUNNING or found.record is None:
            for line in found.ending(settings):
                reporter.say(line)
            code = ABSENT_EXIT if found.state == RUNNING else found.exit_code  # a run with no record: none to wait for
            break
        now = time.monotonic()
        if now >= next_beat:
            Pulse.of_record(found.record).say(reporter)  # the line a run's own heartbeat says
            next_beat = now + call.args.heartbeat
        if deadline is not None and now >= deadline:
            reporter.say(f"still running after {fmt_seconds(timeout)}; run `{command('wait --timeout 540')}` "
                         "again (exit 75)")
            code = int(ExitCode.STILL_RUNNING)
            break
        time.sleep(0.05)
    if call.as_json:
        print(result_json(found.to_json(settings)))
    return code


def _gap(settings: Settings, twin: Optional[EnvTwin], environ: Mapping[str, str], absent: str) -> Optional[str]:
    """Why the env file does not answer this request (``absent`` without one), or None when it does."""
    if twin is None:
        return absent
    gap = twin_gap(twin, settings.request(), environ.get("PATH"))
    return None if gap is None else f"{settings.env_file} does not answer this request: {gap}"


def show_env(call: Call, settings: Settings) -> int:
    environ, twin = call.environ, installed_twin(settings.root)
    if twin is None:  # a twin another user's umask keeps from us is not "no env file": the refusal names the folder
        with contextlib.suppress(FileNotFoundError), open(settings.env_json, "rb"):
            pass
    gap = _gap(settings, twin, environ, f"there is no env file at {settings.env_file}")
    code = ABSENT_EXIT if gap is not None else 0
    if call.as_json:
        data = result_object(ok=gap is None, exit_code=code, reason=gap, hint=start_hint() if gap else None,
                             log=settings.log_file, root=settings.root, env=None,
                             installed=installed(settings.root, settings.request(), environ.get("PATH")))
        if twin is not None and gap is None:
            data.update(how=twin.how, env_file=settings.env_file, version=twin.version, built=twin.built,
                        run_id=twin.run_id or None, elapsed_s=twin.elapsed_s, reason=answers(settings, twin),
                        env=replace(twin.exports, root=settings.root).mapping(environ.get("PYTHONPATH")))
        print(result_json(data))
        return code
    path = settings.env_json if call.args.format == "json" else settings.env_file
    if gap is None:
        try:
            with open(path) as handle:
                sys.stdout.write(handle.read())
            return 0
        except FileNotFoundError:
            gap = f"no env file at {path}"
    with contextlib.suppress(OSError):  # stderr's reader gone (`2>&1 | head -c0`): the exit code still says it
        print(f"ensure-flydsl: {gap}; run `{command()}` (or `{command('start')}`) first", file=sys.stderr)
    return ABSENT_EXIT


def absent_env_file(env_file: str) -> str:
    """Why no env file answers when there is no twin: none is there, or this user cannot see it."""
    try:
        os.stat(env_file)
    except PermissionError as error:
        return f"the env file {env_file} cannot be read by this user ({error.strerror}); run as its owner"
    except OSError:
        return f"there is no env file at {env_file}"
    return f"the env file {env_file} is not one this tool wrote (its record is missing or unreadable)"


def verify(call: Call, settings: Settings) -> int:
    environ, twin = call.environ, installed_twin(settings.root)
    prepend: List[str] = list(twin.pythonpath_prepend) if twin is not None else tree_folders(settings.root)
    gap = _gap(settings, twin, environ, absent_env_file(settings.env_file))
    probe = run_probe(settings.python, modules=probe_modules(settings.require), prefix=prepend, environ=environ,
                      timeout=settings.probe_timeout, timeout_label=settings.label("probe_timeout"))
    verdict = evaluate(probe, settings.min_version, settings.require)
    if gap is not None:  # nothing installed answers this request: exit 1, as for `env` and `wait`
        probed = f"the tree imports ({verdict.reason})" if verdict.reusable else f"the probe: {verdict.reason}"
        code, ok, reason = ABSENT_EXIT, False, f"{gap}; {probed}"
    elif not verdict.reusable:  # the env file answers this request, but its tree does not import now
        code, ok, reason = int(ExitCode.PROBE), False, verdict.reason
    else:
        code, ok, reason = 0, True, verdict.reason
    conflicts = broken_users(probe.interpreter.executable, prepend, environ, settings.probe_timeout) \
        if verdict.reusable else []
    if call.as_json:
        data = probe.to_json()
        data.update(result_object(
            ok=ok, exit_code=code, stage=None if ok else Stage.PROBE, reason=reason, version=probe.version,
            env_file=settings.env_file if ok else None, how=twin.how if ok and twin is not None else None,
            hint=None if ok else (start_hint() if code == ABSENT_EXIT else
                                  f"run `{command()}` to provision a tree that passes, or see `{command('doctor')}`"),
            log=settings.log_file, tree=verdict.tree, conflicts=conflicts,
            installed=installed(settings.root, settings.request(), environ.get("PATH"))))
        print(result_json(data))
    else:
        print(f"python:  {probe.interpreter.executable} ({probe.interpreter.version}, {probe.interpreter.abi})")
        print(f"PYTHONPATH: {probe.pythonpath}")
        for module in probe.modules:
            print(f"  {module.name}: {module.file if module.file else 'FAILED: ' + known(module.error)}")
        print(f"version: {probe.version if probe.version is not None else known(probe.version_error)}")
        print(f"tree:    {known(verdict.tree, 'none (the modules do not import from one tree)')}")
        for user in conflicts:
            print(broken_user_line(user, probe.version))
        print(("ok: " if ok else "not usable: ") + reason)
    return code
