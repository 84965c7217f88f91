"""What ``ensure`` under ``auto`` adds to its failure when the source build cannot succeed, predicted by the
doctor: a release >= the floor that has a wheel for this interpreter and whose tag holds the required
modules (``pipeline/providers/build.py: suggest_release`` asks the same question, through the same
``wheels.suggestion.release_suggestion``).  Asked only when such a check blocks, in seconds at most."""

from __future__ import annotations

from typing import Mapping, Optional

from ensure_flydsl.doctor.verdict import Check
from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.wheels.suggestion import release_suggestion

# Stages only a source build goes through: a release install does not need what blocks them.
SOURCE_ONLY = frozenset({Stage.SUBMODULES, Stage.FIXES, Stage.LLVM, Stage.BUILD})


def release_instead(settings: Settings, environ: Mapping[str, str], blocking: Check) -> Optional[str]:
    """What ``auto``'s failure would suggest instead of the source build that ``blocking`` blocks: the
    release of :func:`release_suggestion`; else None (also when the question gets no quick answer)."""
    if settings.strategy != "auto" or blocking.stage not in SOURCE_ONLY:
        return None
    try:
        interpreter = describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                           timeout_label=settings.label("probe_timeout"))
    except EnsureError:
        return None
    return release_suggestion(settings, interpreter, environ)
