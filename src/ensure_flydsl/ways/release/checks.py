"""What ``ensure`` under ``auto`` adds to its failure when the source build cannot succeed, predicted by the
doctor: a release >= the floor that has a wheel for this interpreter and whose tag holds the required
modules (``ways/source/provider.py: suggest_release`` asks the same question, through the same
``wheels.suggestion.release_suggestion``).  Asked only when such a check blocks, in seconds at most."""

from __future__ import annotations

import os
from typing import Mapping, Optional, Tuple

from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import is_local_repo, read_git
from ensure_flydsl.source.needs import resolve_in
from ensure_flydsl.source.release_tags import pin_as_tag, release_tags, tag_version
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.ways import falls_back
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, RunContext, passed, skipped
from ensure_flydsl.ways.package_index import best_version
from ensure_flydsl.ways.release.download import release_pip, wheel_tags
from ensure_flydsl.ways.release.suggestion import release_suggestion

# Stages only a source build goes through: a release install does not need what blocks them.
SOURCE_ONLY = frozenset({Stage.SUBMODULES, Stage.FIXES, Stage.LLVM, Stage.BUILD})


def release_instead(settings: Settings, environ: Mapping[str, str], blocking: Check) -> Optional[str]:
    """What ``auto``'s failure would suggest instead of the source build that ``blocking`` blocks: the
    release of :func:`release_suggestion`; else None (also when the question gets no quick answer)."""
    if not falls_back(settings.strategy) or blocking.stage not in SOURCE_ONLY:
        return None
    try:
        interpreter = describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                           timeout_label=settings.label("probe_timeout"))
    except EnsureError:
        return None
    return release_suggestion(settings, interpreter, environ)


def release_version_of_pin(settings: Settings, checkout: Optional[str]) -> Tuple[Optional[str], str, bool]:
    """(X, how it is known, True) when the pin is the release vX (a tag, a version, or a commit a release
    tag points at in a local repository); (None, why not, known) otherwise, ``known`` False when only a
    fetch can tell.  As provision.release_version decides after the fetch."""
    tag = pin_as_tag(settings.pin)
    version = tag_version(tag)
    if version is not None:
        return version, f"the pin names the release tag {tag}", True
    candidates = [p for p in (checkout, settings.root) if p and os.path.isdir(os.path.join(p, ".git"))]
    if is_local_repo(settings.repo):
        candidates.append(settings.repo[len("file://"):] if settings.repo.startswith("file://") else settings.repo)
    for path in candidates:
        commit = resolve_in(path, settings.pin)
        if commit is None:
            continue
        try:
            out = read_git(path, "tag", "--points-at", commit).decode()
        except CommandFailed as exc:
            if exc.returncode == -1:  # git did not start, or did not answer
                continue
            out = ""  # it answered no tag
        versions = release_tags(out.split())
        if versions:
            return versions[0], f"commit {commit[:12]} is the release tag v{versions[0]}", True
        return None, f"the pin (commit {commit[:12]}) is not the commit of a release tag vX.Y.Z", True
    return None, "the pin's release is known only after fetching", False


def check_release(ctx: RunContext, checkout: Optional[str], *, demanded: bool) -> Check:
    """A flydsl wheel for the target interpreter (asked with the install's own options).  ``demanded``:
    FLYDSL_STRATEGY=release (blocking); else auto's first choice (never blocking: it falls back)."""
    if ctx.interpreter is None:
        return skipped("release-wheel", "the interpreter does not run", Stage.RELEASE)
    version, how, known = release_version_of_pin(ctx.settings, checkout)
    if version is None and not demanded:
        return skipped("release-wheel", f"auto builds from source: {how}", Stage.RELEASE)
    if version is None and known:
        return Check(name="release-wheel",
                     status=WRONG,
                     detail=how,
                     remedy="pin a release tag (for example v0.2.2) or a version, or use "
                     "FLYDSL_STRATEGY=source",
                     blocking=True,
                     stage=Stage.RELEASE)
    try:
        options = wheel_tags(ctx.interpreter)
    except EnsureError as exc:
        return Check(name="release-wheel",
                     status=WRONG,
                     detail=exc.reason,
                     remedy="use a CPython interpreter, or FLYDSL_STRATEGY=source",
                     blocking=demanded,
                     stage=Stage.RELEASE)
    pip, no_pip = release_pip(ctx.interpreter.executable, ctx.environ)  # the pip ensure downloads with
    fallback = "" if demanded else "; auto builds from source instead"
    if pip is None:
        return Check(name="release-wheel",
                     status=MISSING,
                     detail=f"{how}, but {no_pip}{fallback}",
                     remedy="give the interpreter pip, or use FLYDSL_STRATEGY=source",
                     blocking=demanded,
                     stage=Stage.RELEASE)
    answer = ctx.index.answer("flydsl", options, python=pip)
    wanted = f"flydsl=={version}" if version else f"flydsl >= {ctx.settings.min_version}"
    abi = options[options.index("--abi") + 1]
    if not answer.answered:
        return Check(name="release-wheel",
                     status=MISSING,
                     detail=f"cannot ask the package index for {wanted}: {answer.detail}",
                     remedy="check the network or pip's configuration (PIP_INDEX_URL, pip.conf)",
                     blocking=demanded,
                     stage=Stage.RELEASE)
    found = best_version(answer.versions, exact=version, minimum=None if version else ctx.settings.min_version)
    if found:
        return passed("release-wheel", f"{how}; the package index has a flydsl {found} wheel for {abi}", Stage.RELEASE)
    listed = ", ".join(answer.versions[:5]) or "none"
    return Check(name="release-wheel",
                 status=MISSING,
                 detail=f"{how}, but the package index has no {wanted} wheel for {abi} "
                 f"(versions it has for {abi}: {listed}){fallback}",
                 remedy="use FLYDSL_STRATEGY=source to build the pin, "
                 "or set FLYDSL_PYTHON to an interpreter FlyDSL publishes wheels for (cp310-cp314)",
                 blocking=demanded,
                 stage=Stage.RELEASE)
