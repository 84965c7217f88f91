"""The detached worker that ``start`` launches (``_worker``): an ensure run tracked from its first step,
with its stdout as the log; and the settings as they travel to it."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Dict, Mapping

from ensure_flydsl.pipeline.run import ensure_run
from ensure_flydsl.setting_values import Strategy
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter
from ensure_flydsl.ways.context import Run


def settings_to_json(settings: Settings) -> Dict[str, object]:
    data = {name: getattr(settings, name) for name in (f.name for f in fields(Settings)) if name != "sources"}
    data["require"] = list(settings.require)
    return data


def settings_from_json(text: str) -> Settings:
    data = json.loads(text)
    data["require"] = tuple(data["require"])
    data["git_mirrors"] = tuple((source, to) for source, to in data.get("git_mirrors", ()))
    data["cache_trusted_keys"] = tuple(data.get("cache_trusted_keys", ()))
    data["strategy"] = Strategy(data["strategy"])
    return Settings(**data)


def worker(run_id: str, alive_fd: int, settings_json: str, environ: Mapping[str, str], reporter: Reporter) -> int:
    """The detached worker: an ensure run that is tracked from its first step; its stdout is the log."""
    settings = settings_from_json(settings_json)
    run = Run(settings, reporter, environ, run_id, kind="detached", alive_fd=alive_fd)
    result = ensure_run(run)  # the full run (not the warm path): its record must show how it ended
    reporter.say(f"ready: flydsl {result.version} ({result.how}) for {result.python}; source {result.env_file}")
    return 0
