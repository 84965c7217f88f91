"""The release hint: what ``auto`` adds to its failure when the source build cannot succeed, and what the
doctor predicts, from this one function (``ways/source/provider.py: suggest_release`` and
``ways/release/checks.py: release_instead``), so both say the same.

A release is named only when a run of it would get past the checks it can be judged by here: the package
index has its wheel for the target interpreter (asked through the pip the release way would use), its
version passes the floor (FLYDSL_MIN_VERSION), the repository has its tag, and the tag holds every
FLYDSL_REQUIRE module of the tree's sources (``source/release_tags.py``, the requirements preflight's
reading of a commit's files).  A release whose tag could not be read is named only with that said; none
that qualifies: no hint.  Every question is bounded (pip's at 8 s, git's at 3 s of silence): this is a hint
on a failure path, never a wait.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

from ensure_flydsl.errors import EnsureError
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.release_tags import TagAnswer, TagSource, checked_modules, release_holding, tag_version
from ensure_flydsl.ways.package_index import newest_first, query_versions
from ensure_flydsl.ways.release.download import release_pip, wheel_tags

# A failure path asks the index at most this long (pip's socket timeout, then the whole command); git's
# questions stop after SUGGEST_TIMEOUT_S seconds without a byte.
SUGGEST_TIMEOUT_S = 3.0
SUGGEST_LIMIT_S = 8.0


def wheel_versions(interpreter: Interpreter, min_version: str, environ: Mapping[str, str],
                   exclude: Optional[str]) -> List[str]:
    """The releases >= ``min_version`` (but ``exclude``) that the index has a wheel of for ``interpreter``,
    newest first; none when the question gets no quick answer."""
    pip, _ = release_pip(interpreter.executable, environ)
    if pip is None:
        return []
    try:
        options = wheel_tags(interpreter)
    except EnsureError:
        return []
    answer = query_versions(pip, "flydsl", environ, timeout=SUGGEST_TIMEOUT_S, options=options,
                            limit=SUGGEST_LIMIT_S)
    return newest_first([v for v in answer.versions if v != exclude], min_version)


def release_suggestion(settings: Settings, interpreter: Interpreter, environ: Mapping[str, str]) -> Optional[str]:
    """``FLYDSL_PIN=vX has a wheel for this interpreter and its tag holds M: about 10 s, nothing built`` for
    the newest release X that qualifies (module docstring); the pin's own release is not suggested."""
    pinned = tag_version(settings.pin) if settings.pin.startswith("v") else None
    versions = wheel_versions(interpreter, settings.min_version, environ, pinned)
    if not versions:
        return None
    modules = checked_modules(settings.require)
    source = TagSource(settings.root, settings.repo, settings.git_mirrors, SUGGEST_TIMEOUT_S)
    return suggestion_text(release_holding(source, versions, modules), modules, source.shown())


def suggestion_text(answer: TagAnswer, modules: Sequence[str], repository: str) -> Optional[str]:
    """The hint's words for ``answer``: a release that holds ``modules``, or one whose tag could not be read
    (said so: never claimed to work), or None."""
    names = ", ".join(modules)
    if answer.holding is not None:
        holds = f" and its tag holds {names}" if modules else ""
        return f"FLYDSL_PIN=v{answer.holding} has a wheel for this interpreter{holds}: about 10 s, nothing built"
    if answer.unread is None:
        return None
    unknown = f"whether its tag holds {names}" if modules else f"whether {repository} has its tag"
    return f"FLYDSL_PIN=v{answer.unread} has a wheel for this interpreter, but {unknown} could not be checked " \
           f"({answer.why})"
