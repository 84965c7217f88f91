"""``ensure-flydsl`` (= ``ensure-flydsl ensure``): blocking; answer warm when nothing changed, else run the
pipeline; say what it decided, or print one JSON result object with ``--json``."""

from __future__ import annotations

import json
from typing import List, Mapping, Optional

from ensure_flydsl.pipeline.run import Run, ensure_run
from ensure_flydsl.pipeline.warm import current_fingerprint, keep_warm, try_warm, warm_lines
from ensure_flydsl.runs.markers import read_env_json
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter


def ensure_command(settings: Settings, reporter: Reporter, environ: Mapping[str, str], *, as_json: bool,
                   warm_key: Optional[List[str]]) -> int:
    result = None if settings.verify else try_warm(settings, environ)
    if result is None:
        result = ensure_run(Run(settings, reporter, environ, warm_key=warm_key))
    else:
        twin = read_env_json(settings.env_json)
        if twin is not None:  # the front door answers the next call with these raw inputs
            keep_warm(settings, environ, warm_key, twin, current_fingerprint(settings, environ, twin))
        reporter.say(warm_lines(settings, result)[0])
    if as_json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        reporter.say(warm_lines(settings, result)[1])
    return 0
