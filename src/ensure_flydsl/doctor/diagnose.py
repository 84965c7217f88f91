"""Predict, in a few seconds, whether the configured strategy can succeed here, and why not.

A source build that lacks something fails late and expensively: without patchelf after LLVM and all the
C++ have compiled; without HIP's CMake package at configure.  The doctor checks first what the run will
need, read from the pin's source where it can be (:mod:`ensure_flydsl.source.needs`): the interpreter and its
headers, git and the repository, compilers, cmake, ninja, patchelf, nanobind, HIP's CMake package and its
library-name mismatch, MLIR_PATH, disk and memory, the package index, the third-party modules the pin's code
imports (:mod:`ensure_flydsl.doctor.requirements`), and for ``release`` a wheel for the target interpreter
(the shared checks: ``doctor/local_checks.py``, ``remote_checks.py``, ``requirements.py``; each way's own, for
the ways ``ways.STRATEGY`` gives the strategy: ``ways/*/checks.py``, through ``PREDICTIONS``).  Independent
checks run concurrently; network checks have short timeouts.

Each :class:`Check` says ok / missing / wrong / skipped, the detail and the remedy.  ``blocking`` marks
what the configured strategy cannot get past; ``stage`` is the run's step that would fail, whose exit code
the doctor returns (and ``ensure`` stops with, before anything long starts): settings 64, fetch 2,
checkout 3, requirements 6, submodules 2, llvm 4, build 5, probe 6, release 8.  ``provided`` marks what is missing here
but provided by the tool itself (a private build tool from the package index, the private hip overlay), so
not blocking.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.doctor.local_checks import (
    check_git,
    check_interpreter,
    check_marker_sharing,
    check_root,
    installer_python,
)
from ensure_flydsl.doctor.remote_checks import check_index, check_repository
from ensure_flydsl.doctor.requirements import check_requirements
from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.setting_values import Strategy
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.mirrors import rewrite
from ensure_flydsl.source.needs import KNOWN_FLYDSL_NEEDS, BuildNeeds, find_needs
from ensure_flydsl.ways import Way, demands, falls_back, provisions, tries
from ensure_flydsl.ways.checks import OK, SKIPPED, Check, Index, RunContext, Submit
from ensure_flydsl.ways.release.checks import release_instead
from ensure_flydsl.ways.source.checks import llvm_step_needed
from ensure_flydsl.ways.table import ways_for


def mirrored(settings: Settings) -> str:
    """The repository git fetches from (a local mirror's sources can be read before any fetch)."""
    return rewrite(settings.repo, settings.git_mirrors)[0]


# The reuse decision belongs to the pipeline (above the doctor): it is handed in as a check.
ReuseCheck = Callable[[Settings, Mapping[str, str], Optional[Interpreter]], Check]


def first_blocking(checks: Sequence[Check]) -> Optional[Check]:
    """The blocking check of the earliest stage: what a run would stop at first."""
    found = [c for c in checks if c.blocking]
    if not found:
        return None
    return min(found, key=lambda c: len(Stage) if c.stage.order is None else c.stage.order)


def stop_if_blocked(checks: Sequence[Check], strategy: Strategy) -> None:
    """For ``ensure``: raise the doctor's finding (stage "doctor", the failing stage's exit code) before
    anything long starts, instead of failing after a long build."""
    first = first_blocking(checks)
    if first is None:
        return
    others = [c.name for c in checks if c.blocking and c is not first]
    more = f" (also blocking: {', '.join(others)})" if others else ""
    raise EnsureError(
        ExitCode(first.exit_code),
        f"checked before building: the {strategy} strategy cannot succeed here; {first.name}: {first.detail}",
        stage=Stage.DOCTOR,
        hint=f"{first.remedy}{more}; `ensure-flydsl doctor` lists every check",
        detail="\n".join(line for c in checks if c.blocking for line in render_check(c)),
    )


def _without_build_blocks(checks: List[Check], version_check: Check) -> List[Check]:
    """auto installs an available release wheel and builds nothing: build problems, and submodules only a
    source build fetches, do not block it."""
    note = f" (only for a source build: auto installs the release wheel, {version_check.detail.split('; ')[-1]})"
    return [replace(c, blocking=False, remedy=c.remedy + note)
            if c.blocking and c.stage in (Stage.SUBMODULES, Stage.LLVM, Stage.BUILD) else c for c in checks]


def run_checks(
    settings: Settings,
    environ: Mapping[str, str],
    *,
    checkout: Optional[str] = None,
    timeout: float = 5.0,
    reuse: Optional[ReuseCheck] = None,
    interpreter: Optional[Interpreter] = None,
) -> List[Check]:
    """Every check the configured strategy depends on: the shared ones and the prediction of each way
    ``ways.STRATEGY`` gives it, in the order a run meets them.

    ``checkout``: a folder holding the pin's source (the root after fetch), read for the build's needs;
    without it they are read from the root's or a local repository with git, else FlyDSL's known needs
    are assumed.  ``reuse``: the reuse decision, given by the pipeline that owns it (the doctor command
    passes it; ``ensure`` has just made that decision itself).  ``interpreter``: the target interpreter as
    the caller has just described it (a run, before its build), taken as it is instead of probed again.
    """
    strategy = settings.strategy
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=10, thread_name_prefix="doctor")
    try:
        submit: Submit = pool.submit
        f_interp = pool.submit(check_interpreter, settings, environ, interpreter)
        builds, fetches = tries(strategy, Way.SOURCE), provisions(strategy)
        f_needs = pool.submit(find_needs, settings.root, mirrored(settings), settings.pin, checkout,
                              environ) if builds else None
        early: List["concurrent.futures.Future[Check]"] = []
        if fetches:
            early = [submit(check_root, settings), submit(check_git, environ),
                     submit(check_repository, settings, environ, timeout, checkout)]
        interp_check, interp = f_interp.result()
        needs = f_needs.result() if f_needs is not None else KNOWN_FLYDSL_NEEDS
        llvm = builds and llvm_step_needed(settings, needs, interp)
        index = Index(installer_python(interp, settings), environ, timeout)
        ctx = RunContext(settings=settings, environ=environ, timeout=timeout, interpreter=interp, needs=needs,
                         llvm=llvm, index=index)
        if reuse is not None:
            early.insert(0, submit(reuse, settings, environ, interp))
        predicted = {way.way: way.predict(ctx, checkout, submit) for way in ways_for(strategy)}
        # Shown as a run meets them: a build's needs, the pin's imports (every way's), the release wheel.
        later = predicted.get(Way.SOURCE, [])
        if fetches:
            later.append(submit(check_requirements, settings, environ, interp, checkout))
        later += predicted.get(Way.RELEASE, [])
        checks = [interp_check] + [f.result() for f in early + later] + [check_marker_sharing(settings)]
        checks += [f.result() for f in predicted.get(Way.CACHE, [])]
        if fetches:
            checks.append(check_index(ctx, release=demands(strategy, Way.RELEASE)))
        wheel = next((c for c in checks if c.name == "release-wheel"), None)
        if falls_back(strategy) and wheel is not None and wheel.status == OK:
            checks = _without_build_blocks(checks, wheel)
        return checks
    finally:
        pool.shutdown(wait=True)


# ---------------------------------------------------------------------------------------------------------
# The verdict and its rendering
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    strategy: Strategy
    checks: Tuple[Check, ...]
    needs: Optional[BuildNeeds]
    seconds: float
    suggestion: Optional[str] = None  # auto's way around a blocked source build (ways/release/checks.py)

    @property
    def reusable(self) -> bool:
        return any(c.name == "reuse" and c.status == OK for c in self.checks)

    @property
    def first_blocking(self) -> Optional[Check]:
        return first_blocking(self.checks)

    @property
    def ok(self) -> bool:
        return self.reusable or self.first_blocking is None

    @property
    def exit_code(self) -> int:
        first = self.first_blocking
        return 0 if self.ok or first is None else first.exit_code

    def verdict(self) -> str:
        first = self.first_blocking
        if self.reusable:
            tail = f"; a new build could not: {first.name}: {first.detail}" if first else ""
            return f"the configured strategy ({self.strategy}) can succeed here: a reusable FlyDSL is there{tail}"
        if first is None:
            return f"the configured strategy ({self.strategy}) can succeed here"
        instead = f"; or, without a build, {self.suggestion}" if self.suggestion else ""
        return (f"the configured strategy ({self.strategy}) cannot succeed here: {first.name}: {first.detail} "
                f"(a run would stop at its {first.stage} step, exit {first.exit_code}){instead}")

    def to_json(self) -> Dict[str, object]:
        return {
            "strategy": self.strategy.value,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "verdict": self.verdict(),
            "needs": self.needs.to_json() if self.needs else None,
            "checks": [c.to_json() for c in self.checks],
            "seconds": round(self.seconds, 3),
            "suggestion": self.suggestion,
        }


def diagnose(settings: Settings, environ: Mapping[str, str], *, reuse: Optional[ReuseCheck] = None,
             checkout: Optional[str] = None, timeout: float = 5.0) -> Diagnosis:
    started = time.monotonic()
    checks = run_checks(settings, environ, checkout=checkout, timeout=timeout, reuse=reuse)
    needs = None
    if tries(settings.strategy, Way.SOURCE):
        needs = find_needs(settings.root, mirrored(settings), settings.pin, checkout, environ)
    diagnosis = Diagnosis(settings.strategy, tuple(checks), needs, time.monotonic() - started)
    blocking = diagnosis.first_blocking
    if not diagnosis.ok and blocking is not None:
        suggestion = release_instead(settings, environ, blocking)
        diagnosis = replace(diagnosis, suggestion=suggestion, seconds=time.monotonic() - started)
    return diagnosis


def status_label(check: Check) -> str:
    """UPPERCASE blocks the configured strategy; "provide" is missing here but provided by the tool."""
    if check.status == OK:
        return "ok"
    if check.status == SKIPPED:
        return "skip"
    if check.provided:
        return "provide"
    return check.status.upper() if check.blocking else check.status


def render_check(check: Check, width: int = 15) -> List[str]:
    lines = [f"  [{status_label(check)}]".ljust(12) + f"{check.name.ljust(width)} {check.detail}"]
    if check.status not in (OK, SKIPPED) and check.remedy:
        lines.append(" " * (12 + width + 1) + f"remedy: {check.remedy}")
    return lines
