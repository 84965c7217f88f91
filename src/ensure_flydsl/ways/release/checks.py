"""The release way's prediction, and ``auto``'s hint when a source build cannot succeed: a release whose wheel
the index has for the interpreter, that passes the floor and whose tag holds every FLYDSL_REQUIRE module."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Tuple

from packaging.version import Version

from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.probe.interpreter import describe_interpreter
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source import requirements
from ensure_flydsl.source.git import local_repositories, pin_commits, read_git
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.ways import falls_back
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, CheckStatus, RunContext, passed, skipped
from ensure_flydsl.ways.package_index import newest_first, query_versions
from ensure_flydsl.ways.release.download import release_pip, wheel_tags

# Stages only a source build goes through: a release install does not need what blocks them.
SOURCE_ONLY = frozenset({Stage.SUBMODULES, Stage.FIXES, Stage.LLVM, Stage.BUILD})
# The hint asks the index for at most this long (pip's socket timeout, then the whole command: pip's own start
# took over 8 s on a loaded 2-core host); git's questions stop after SUGGEST_TIMEOUT_S without a byte.
SUGGEST_TIMEOUT_S = 3.0
SUGGEST_LIMIT_S = 20.0


def release_version_of_pin(settings: Settings, checkout: Optional[str]) -> Tuple[Optional[str], str, bool]:
    """(X, how it is known, True) when the pin is the release vX (a tag, a version, or a commit a release tag
    points at in a local repository); else (None, why not, whether that is known before a fetch)."""
    tag = requirements.pin_as_tag(settings.pin)
    version = requirements.tag_version(tag)
    if version is not None:
        return version, f"the pin names the release tag {tag}", True
    for path, commit in pin_commits(settings.root, settings.repo, settings.pin, settings.git_mirrors, own=checkout):
        try:
            out = read_git(path, "tag", "--points-at", commit).decode()
        except CommandFailed as exc:
            if exc.returncode == -1:  # git did not start, or did not answer
                continue
            out = ""  # it answered no tag
        versions = requirements.release_tags(out.split())
        if versions:
            return versions[0], f"commit {commit[:12]} is the release tag v{versions[0]}", True
        return None, f"the pin (commit {commit[:12]}) is not the commit of a release tag vX.Y.Z", True
    return None, "the pin's release is known only after fetching", False


def check_release(ctx: RunContext, checkout: Optional[str], *, demanded: bool) -> Check:
    """A flydsl wheel for the target interpreter, asked with the install's own options; blocking only when
    the release is ``demanded`` (under ``auto`` a source build follows)."""
    stage = Stage.RELEASE
    if ctx.interpreter is None:
        return skipped("release-wheel", "the interpreter does not run", stage)
    version, how, known = release_version_of_pin(ctx.settings, checkout)
    if version is None and not demanded:
        return skipped("release-wheel", f"auto builds from source: {how}", stage)

    def refused(status: CheckStatus, detail: str, remedy: str) -> Check:
        return Check("release-wheel", status, detail, remedy, blocking=demanded, stage=stage)

    if version is None and known:
        return refused(WRONG, how, "pin a release tag (for example v0.2.2) or a version, or use FLYDSL_STRATEGY=source")
    try:
        options = wheel_tags(ctx.interpreter)
    except EnsureError as exc:
        return refused(WRONG, exc.reason, "use a CPython interpreter, or FLYDSL_STRATEGY=source")
    pip, no_pip = release_pip(ctx.interpreter.executable, ctx.environ)  # the pip ensure downloads with
    fallback = "" if demanded else "; auto builds from source instead"
    if pip is None:
        return refused(MISSING, f"{how}, but {no_pip}{fallback}",
                       "give the interpreter pip, or use FLYDSL_STRATEGY=source")
    answer = ctx.index.answer("flydsl", options, python=pip)
    wanted = f"flydsl=={version}" if version else f"flydsl >= {ctx.settings.min_version}"
    abi = options[options.index("--abi") + 1]
    if not answer.answered:
        return refused(MISSING, f"cannot ask the package index for {wanted}: {answer.detail}",
                       "check the network or pip's configuration (PIP_INDEX_URL, pip.conf)")
    found = next((v for v in newest_first(answer.versions, None if version else ctx.settings.min_version)
                  if version is None or Version(v) == Version(version)), None)
    if found:
        return passed("release-wheel", f"{how}; the package index has a flydsl {found} wheel for {abi}", stage)
    listed = ", ".join(answer.versions[:5]) or "none"
    return refused(MISSING, f"{how}, but the package index has no {wanted} wheel for {abi} (versions it has for "
                   f"{abi}: {listed}){fallback}", "use FLYDSL_STRATEGY=source to build the pin, or set FLYDSL_PYTHON "
                   "to an interpreter FlyDSL publishes wheels for (cp310-cp314)")


def release_instead(settings: Settings, environ: Mapping[str, str], blocking: Check) -> Optional[str]:
    """The doctor's hint when ``blocking`` stops the source build that ``auto`` falls back to."""
    if not falls_back(settings.strategy) or blocking.stage not in SOURCE_ONLY:
        return None
    try:
        interpreter = describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                           timeout_label=settings.label("probe_timeout"))
    except EnsureError:
        return None
    return release_suggestion(settings, interpreter, environ)


def release_suggestion(settings: Settings, interpreter: Interpreter, environ: Mapping[str, str]) -> Optional[str]:
    """The newest release but the pin's own that qualifies (module docstring), in words; or None."""
    pinned = requirements.tag_version(settings.pin) if settings.pin.startswith("v") else None
    pip, _ = release_pip(interpreter.executable, environ)
    if pip is None or interpreter.implementation != "cpython":  # wheel_tags' refusal
        return None
    listed = query_versions(pip, "flydsl", environ, timeout=SUGGEST_TIMEOUT_S, options=wheel_tags(interpreter),
                            limit=SUGGEST_LIMIT_S).versions
    versions = newest_first([v for v in listed if v != pinned], settings.min_version)
    if not versions:
        return None
    modules = requirements.checked_modules(settings.require)
    source = requirements.TagSource(settings.root, settings.repo, settings.git_mirrors, SUGGEST_TIMEOUT_S)
    answer = requirements.release_holding(source, versions, modules)
    text = suggestion_text(answer, modules, source.shown())
    if text is None or answer.commit is None:
        return text
    local = local_repositories(settings.root, settings.repo, settings.git_mirrors)
    commits = requirements.beyond_release(local, answer.commit, settings.pin)
    if not commits:
        return text  # the pin is the release (or older), or no repository on disk can say
    # what the release lacks of the pin: the commits of compiled code named
    compiled = [f"{short} {subject}" for short, subject, changes in commits if changes]
    named = f": {'; '.join(compiled)}" if compiled else ""
    return (f"{text}; but it is not the pin: the pin is {len(commits)} commit{'s' * (len(commits) != 1)} beyond "
            f"v{answer.holding or answer.unread}, {len(compiled)} of them in compiled code (outside the Python package "
            f"and kernels/){named}")


def suggestion_text(answer: requirements.TagAnswer, modules: Sequence[str], repository: str) -> Optional[str]:
    """A release that holds ``modules``, or one whose tag could not be read (said so: never claimed to work)."""
    names = ", ".join(modules)
    if answer.holding is not None:
        holds = f" and its tag holds {names}" if modules else ""
        return f"FLYDSL_PIN=v{answer.holding} has a wheel for this interpreter{holds}: about 10 s, nothing built"
    if answer.unread is None:
        return None
    unknown = f"whether its tag holds {names}" if modules else f"whether {repository} has its tag"
    return f"FLYDSL_PIN=v{answer.unread} has a wheel for this interpreter, but {unknown} could not be checked " \
           f"({answer.why})"
