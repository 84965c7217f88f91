"""What ``ensure`` under ``auto`` adds to its failure when the source build cannot succeed, predicted by the
doctor: a release >= the floor that the repository tags and the package index has a wheel of for this
interpreter (``pipeline/providers/build.py: suggest_release`` asks the same question, through the same
``wheels.download.release_suggestion``).  Asked only when such a check blocks, in seconds at most."""

from __future__ import annotations

from typing import Mapping, Optional

from ensure_flydsl.doctor.remote_checks import remote_tag_names
from ensure_flydsl.doctor.verdict import Check
from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.wheels.download import SUGGEST_TIMEOUT_S, release_suggestion
from ensure_flydsl.wheels.release import tag_version

# Stages only a source build goes through: a release install does not need what blocks them.
SOURCE_ONLY = frozenset({Stage.SUBMODULES, Stage.FIXES, Stage.LLVM, Stage.BUILD})


def release_instead(settings: Settings, environ: Mapping[str, str], blocking: Check) -> Optional[str]:
    """``FLYDSL_PIN=vX has a wheel for this interpreter: ...`` when ``auto``'s source build is blocked by
    ``blocking`` and such a release exists; else None (also when the question gets no quick answer)."""
    if settings.strategy != "auto" or blocking.stage not in SOURCE_ONLY:
        return None
    try:
        interpreter = describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                           timeout_label=settings.label("probe_timeout"))
    except EnsureError:
        return None
    tags = remote_tag_names(settings, environ, SUGGEST_TIMEOUT_S)
    pinned = tag_version(settings.pin) if settings.pin.startswith("v") else None
    return release_suggestion(interpreter, settings.min_version, environ, tags, exclude=pinned)
