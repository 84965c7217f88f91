"""``ensure-flydsl`` (= ``ensure-flydsl ensure``): blocking; answer warm when nothing changed, else run the
pipeline; say what it decided, or print one JSON result object with ``--json``."""

from __future__ import annotations

from ensure_flydsl.pipeline.warm import try_warm
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter, known

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Mapping


def ensure_command(settings: Settings, reporter: Reporter, environ: Mapping[str, str], *, as_json: bool) -> int:
    result = None if settings.verify else try_warm(settings, environ)
    if result is None:
        # Imported here: the warm path (most calls) needs none of the pipeline's machinery.
        from ensure_flydsl.pipeline.run import Run, ensure_run

        result = ensure_run(Run(settings, reporter, environ))
    else:
        reporter.say(f"nothing changed since the last success (fingerprint); {settings.env_file} is current")
    if as_json:
        import json  # here: the warm call without --json imports no JSON module (support/files.py: _loads)

        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        reporter.say(f"ready: flydsl {known(result.version)} ({known(result.how)}) for {known(result.python)}; "
                     f"source {result.env_file}")
    return 0
