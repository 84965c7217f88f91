"""The runtime-requirements preflight: the third-party modules the pin's code imports unconditionally
(read from its sources, :mod:`ensure_flydsl.source.requirements`), asked of the target interpreter in one
subprocess without importing them (:func:`ensure_flydsl.probe.interpreter.find_modules`).

A run does this after the checkout and before any wheel is downloaded or anything is built, and stops
(exit 6, stage ``requirements``) when the interpreter lacks one: a build that cannot pass the final probe
is not started.  The doctor shows the same finding as its ``requirements`` check.  A module that is there
but broken is not seen here (nothing is imported); the final probe still catches it.
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Mapping, Optional, Sequence, Tuple

from ensure_flydsl.build.wheels import pin_as_tag
from ensure_flydsl.doctor.check import MISSING, Check, _ok, _skip
from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.probe.interpreter import find_modules
from ensure_flydsl.probe.records import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.requirements import Requirement, Sources, find_requirements, pin_sources

STAGE = "requirements"


@dataclasses.dataclass(frozen=True)
class Finding:
    """What the pin's code needs from the interpreter and what it lacks."""

    python: str
    sources: str  # where the sources were read
    files: int  # the tree's files the walk read
    needed: Tuple[Requirement, ...]  # third-party modules (the standard library left out)
    missing: Tuple[Requirement, ...]

    def names(self, which: Sequence[Requirement]) -> str:
        return ", ".join(r.module for r in which)


def assess(sources: Sources, python: str, require: Sequence[str], environ: Mapping[str, str],
           timeout: float, timeout_label: str) -> Finding:
    """Walk the sources from ``require``, then ask ``python`` about every module outside the tree."""
    walk = find_requirements(require, sources)
    names = walk.names()
    answer = find_modules(python, names, environ=environ, timeout=timeout, timeout_label=timeout_label) \
        if names else {}
    needed = tuple(r for r in walk.requirements if answer.get(r.module) != "stdlib")
    missing = tuple(r for r in needed if answer.get(r.module) == "missing")
    return Finding(python, sources.where, len(walk.files), needed, missing)


def _line(req: Requirement) -> str:
    chain = " -> ".join(req.via)
    return f"{req.module}: imported by {req.file} line {req.line}" + (f" (reached from {chain})" if chain else "")


def reason(finding: Finding) -> str:
    said = "; ".join(f"{r.module} (imported by {r.where()})" for r in finding.missing)
    return (f"{finding.python} cannot import {finding.names(finding.missing)}, which the pin's code imports "
            f"unconditionally: {said}")


def remedy(finding: Finding) -> str:
    names = " ".join(r.module for r in finding.missing)
    python = shlex.quote(finding.python)
    return (f"install {names} for {finding.python} (for example `{python} -m pip install {names}`; a package's "
            "pip name may differ from its module's, and torch for ROCm comes from its own index), or set "
            "FLYDSL_PYTHON to an interpreter that has them; then run again")


def requirements_error(finding: Finding) -> EnsureError:
    """The run's stop: exit 6 at stage ``requirements``, before anything is downloaded or built."""
    return EnsureError(ExitCode.PROBE, reason(finding), stage=STAGE, hint=remedy(finding),
                       detail="\n".join(_line(r) for r in finding.missing))


def stop_if_missing(finding: Finding) -> None:
    if finding.missing:
        raise requirements_error(finding)


def summary(finding: Finding) -> str:
    needed = finding.names(finding.needed) or "nothing outside the tree and the standard library"
    return f"the pin's code ({finding.files} files read from {finding.sources}) imports {needed}"


def check_requirements(settings: Settings, environ: Mapping[str, str], interp: Optional[Interpreter],
                       checkout: Optional[str]) -> Check:
    """The doctor's view of the preflight: blocking when the interpreter lacks a module the pin imports."""
    if interp is None:
        return _skip(STAGE, "the interpreter does not run", STAGE)
    pin = pin_as_tag(settings.pin) if settings.strategy == "release" else settings.pin
    sources = pin_sources(settings.root, settings.repo, pin, checkout)
    if sources is None:
        return _skip(STAGE, f"the pin's sources cannot be read here yet (no checkout of {pin} in "
                     f"{settings.root}, and {settings.repo} is not a local repository); a run checks them "
                     "after fetching, before downloading or building anything", STAGE)
    try:
        finding = assess(sources, interp.executable, settings.require, environ,
                         settings.probe_timeout, settings.label("probe_timeout"))
    except EnsureError as exc:
        return _skip(STAGE, f"could not ask {interp.executable}: {exc.reason}", STAGE)
    if not finding.missing:
        return _ok(STAGE, f"{summary(finding)}; {interp.executable} has them all", STAGE)
    return Check(STAGE, MISSING, reason(finding), remedy(finding), True, STAGE)

