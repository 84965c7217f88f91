"""The third-party modules the pin's code imports unconditionally, read from its sources and asked of the target
interpreter without importing them: a run stops (exit 6) after the fetch, before building, when the pin lacks a
required module or the interpreter lacks one; the doctor shows the same finding."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.probe.interpreter import find_modules
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.requirements import (
    Absent,
    Requirement,
    Sources,
    absent_modules,
    find_requirements,
    pin_as_tag,
    pin_sources,
)
from ensure_flydsl.ways import Way, demands
from ensure_flydsl.ways.checks import MISSING, Check, passed, skipped

CHECK = "requirements"  # the doctor check's name; its stage is Stage.REQUIREMENTS


@dataclass(frozen=True)
class Finding:
    """What the pin's code needs from the interpreter and what it lacks."""

    python: str
    sources: str  # where the sources were read
    files: int  # the tree's files the walk read
    needed: Tuple[Requirement, ...]  # third-party modules (the standard library left out)
    missing: Tuple[Requirement, ...]
    absent: Tuple[Absent, ...] = ()  # required modules the pin does not have
    require: Tuple[str, ...] = ()
    pin: str = "the pin"

    def names(self, which: Sequence[Requirement]) -> str:
        return ", ".join(r.module for r in which)


def assess(sources: Sources, python: str, require: Sequence[str], environ: Mapping[str, str],
           timeout: float, timeout_label: str, pin: Optional[str] = None) -> Finding:
    """Which required modules the sources lack, and which modules outside the tree ``python`` lacks."""
    absent = tuple(absent_modules(require, sources))
    walk = find_requirements(require, sources)
    names = walk.names()
    answer = find_modules(python, names, environ=environ, timeout=timeout, timeout_label=timeout_label) \
        if names else {}
    needed = tuple(r for r in walk.requirements if answer.get(r.module) != "stdlib")
    missing = tuple(r for r in needed if answer.get(r.module) == "missing")
    return Finding(python=python, sources=sources.where, files=len(walk.files), needed=needed, missing=missing,
                   absent=absent, require=tuple(require), pin=pin or "the pin")


def advised_require(finding: Finding) -> Optional[str]:
    """FLYDSL_REQUIRE with each absent module replaced by the one module of that name the pin has, or None."""
    moved = {a.module: a.instead[0][0] for a in finding.absent if len(a.instead) == 1}
    if len(moved) != len(finding.absent):
        return None
    return ",".join(moved.get(m, m) for m in finding.require)


def _absent_line(absent: Absent, pin: str) -> str:
    if not absent.instead:
        last = absent.module.split(".")[-1]
        return f"{absent.module} is not in {pin} (no module named {last} anywhere in its {absent.module.split('.')[0]})"
    paths = " and ".join(path for _, path in absent.instead)
    return f"{absent.module} is not in {pin}; {paths} {'is' if len(absent.instead) == 1 else 'are'}"


def absent_reason(finding: Finding) -> str:
    replaced = advised_require(finding)
    return "; ".join(_absent_line(a, finding.pin) for a in finding.absent) + (
        f": set FLYDSL_REQUIRE={replaced}" if replaced else "")


def problem(finding: Finding) -> Optional[Tuple[str, str, str]]:
    """(reason, remedy, detail) of a required module the pin lacks, or one the interpreter lacks; else None."""
    if finding.absent:
        replaced, absent = advised_require(finding), [a.module for a in finding.absent]
        kept = ",".join(m for m in finding.require if m not in absent) or "flydsl"
        remedy = (f"set FLYDSL_REQUIRE={replaced} (the modules that must import from the tree)" if replaced else
                  f"set FLYDSL_REQUIRE to modules {finding.pin} has (for example FLYDSL_REQUIRE={kept})")
        return (absent_reason(finding), f"{remedy}, or pin a commit that has {', '.join(absent)}; then run again",
                f"sources read from {finding.sources}")
    if not finding.missing:
        return None
    said = "; ".join(f"{r.module} (imported by {r.where()})" for r in finding.missing)
    names = " ".join(r.module for r in finding.missing)
    reason = (f"{finding.python} cannot import {finding.names(finding.missing)}, which the pin's code imports "
              f"unconditionally: {said}")
    remedy = (f"install {names} for {finding.python} (for example `{shlex.quote(finding.python)} -m pip install "
              f"{names}`; a package's pip name may differ from its module's, and torch for ROCm comes from its own "
              "index), or set FLYDSL_PYTHON to an interpreter that has them; then run again")
    chains = [f" (reached from {' -> '.join(r.via)})" if r.via else "" for r in finding.missing]
    detail = "\n".join(f"{r.module}: imported by {r.where()}{chain}" for r, chain in zip(finding.missing, chains))
    return reason, remedy, detail


def stop_if_missing(finding: Finding) -> None:
    """The run's stop (exit 6 at stage ``requirements``)."""
    found = problem(finding)
    if found is not None:
        raise EnsureError(ExitCode.PROBE, found[0], stage=Stage.REQUIREMENTS, hint=found[1], detail=found[2])


def summary(finding: Finding) -> str:
    needed = finding.names(finding.needed) or "nothing outside the tree and the standard library"
    return f"the pin's code ({finding.files} files read from {finding.sources}) imports {needed}"


def check_requirements(settings: Settings, environ: Mapping[str, str], interp: Optional[Interpreter],
                       checkout: Optional[str]) -> Check:
    """The doctor's view of the preflight: blocking when the interpreter lacks a module the pin imports."""
    if interp is None:
        return skipped(CHECK, "the interpreter does not run", Stage.REQUIREMENTS)
    pin = pin_as_tag(settings.pin) if demands(settings.strategy, Way.RELEASE) else settings.pin
    sources = pin_sources(settings.root, settings.repo, pin, checkout)
    if sources is None:
        return skipped(CHECK, f"the pin's sources cannot be read here yet (no checkout of {pin} in "
                     f"{settings.root}, and {settings.repo} is not a local repository); a run checks them "
                     "after fetching, before downloading or building anything", Stage.REQUIREMENTS)
    try:
        finding = assess(sources, interp.executable, settings.require, environ,
                         settings.probe_timeout, settings.label("probe_timeout"), pin)
    except EnsureError as exc:
        return skipped(CHECK, f"could not ask {interp.executable}: {exc.reason}", Stage.REQUIREMENTS)
    found = problem(finding)
    if found is None:
        return passed(CHECK, f"{summary(finding)}; {interp.executable} has them all", Stage.REQUIREMENTS)
    return Check(CHECK, MISSING, found[0], found[1], blocking=True, stage=Stage.REQUIREMENTS)

