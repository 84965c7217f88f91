"""Predict in seconds whether the configured strategy can succeed here, and why not (shared checks, the pin's imports,
each way's prediction, concurrently); a blocking check's stage is the step that would fail, and its exit code."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.probe.gate import shadowing
from ensure_flydsl.probe.interpreter import FLYDSL_USERS, broken_users, describe_interpreter, find_modules
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.runs.answer import marker_sharing
from ensure_flydsl.runs.markers import installed_twin
from ensure_flydsl.settings import Settings, Strategy
from ensure_flydsl.source.git import (
    HEX,
    WRONG_PIN,
    is_full_hash,
    is_local_repo,
    is_repository,
    ref_objects,
    repo_path,
    resolve_in,
    rewrite,
)
from ensure_flydsl.source.needs import KNOWN_FLYDSL_NEEDS, BuildNeeds, find_needs
from ensure_flydsl.source.requirements import (
    Absent,
    Requirement,
    Sources,
    absent_modules,
    find_requirements,
    pin_as_tag,
    pin_sources,
)
from ensure_flydsl.source.root import RootKind, classify_root, creatable_problem
from ensure_flydsl.support.launcher import command
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.ways import Way, demands, falls_back, provisions, tries
from ensure_flydsl.ways.checks import (
    MISSING,
    OK,
    SKIPPED,
    WRONG,
    Check,
    Index,
    RunContext,
    Submit,
    no_mirror,
    passed,
    reach,
    skipped,
)
from ensure_flydsl.ways.release.download import has_pip
from ensure_flydsl.ways.release.provider import SOURCE_ONLY, release_suggestion
from ensure_flydsl.ways.source.checks import llvm_step_needed
from ensure_flydsl.ways.source.tools import find_executable_tool
from ensure_flydsl.ways.table import ways_for

# The reuse decision belongs to the pipeline (above the doctor): it is handed in as a check.
ReuseCheck = Callable[[Settings, Mapping[str, str], Optional[Interpreter]], Check]
TIMEOUT_S = 5.0  # for each question to a git remote or the package index


# -- the shared checks ------------------------------------------------------------------------------------
def check_interpreter(settings: Settings, environ: Mapping[str, str],
                      known: Optional[Interpreter] = None) -> Tuple[Check, Optional[Interpreter]]:
    """The target interpreter described by a probe, or ``known`` (the caller's description of it) as it is."""
    label = settings.label("python")
    try:
        interp = known or describe_interpreter(settings.python, environ, timeout=settings.probe_timeout,
                                               timeout_label=settings.label("probe_timeout"))
    except EnsureError as exc:
        return Check("interpreter", WRONG, f"{label}={settings.python}: {exc.reason}",
                     f"set {label} to the Python interpreter that will import FlyDSL", blocking=True,
                     stage=Stage.SETTINGS), None
    return passed("interpreter", f"{interp.executable} {interp.version} ({interp.abi})", Stage.SETTINGS), interp


def check_root(settings: Settings) -> Check:
    root, label = settings.root, settings.label("root")
    problem = None if os.path.lexists(root) else creatable_problem(root)
    if problem is not None:
        return Check("root", WRONG, f"{root} cannot be created: {problem[1]}",
                     f"set {label} to a folder this user can create", blocking=True, stage=Stage.SETTINGS)
    state = classify_root(root, settings.repo)
    if state.kind is RootKind.FOREIGN:
        return Check("root", WRONG, f"{root}: {state.reason}",
                     f"set {label} to an empty or new folder (ensure-flydsl never overwrites others' files)",
                     blocking=True, stage=Stage.SETTINGS)
    return passed("root", f"{root} ({state.kind}{': ' + state.reason if state.reason else ''})", Stage.SETTINGS)


def check_marker_sharing(settings: Settings) -> Check:
    sharing = marker_sharing(settings)
    if sharing is None:
        return passed("fail-marker", f"{settings.fail_marker} is this root's alone", Stage.SETTINGS)
    return Check("fail-marker", WRONG, *sharing, blocking=False, stage=Stage.SETTINGS)


def check_flydsl_users(settings: Settings, environ: Mapping[str, str]) -> Check:
    """Other FlyDSL users the root's tree breaks, as a run and ``verify`` name them; never blocking."""
    twin, name = installed_twin(settings.root), "flydsl-users"
    users = ", ".join(FLYDSL_USERS)
    if twin is None:
        return skipped(name, f"no tree in {settings.root} yet to import {users} with", Stage.PUBLISH)
    broken = broken_users(twin.python, twin.pythonpath_prepend, environ, settings.probe_timeout)
    if not broken:
        return passed(name, f"none installed fails with the root's flydsl {twin.version} ({users})", Stage.PUBLISH)
    return Check(name, WRONG, "; ".join(f"{u['module']} fails with the root's flydsl {twin.version}"
                                        + (f" (it needs >= {u['floor']})" if u["floor"] else "") + f": {u['error']}"
                                        for u in broken),
                 "one process loads one flydsl: a process that needs it needs its own PYTHONPATH, without this env "
                 "file (docs/GEAK.md)", blocking=False, stage=Stage.PUBLISH)


def check_git(environ: Mapping[str, str]) -> Check:
    git = find_executable_tool("git", environ.get("PATH", os.defpath))
    if not git.found:
        return Check("git", MISSING, "git is not on PATH; it fetches the pin (and LLVM)",
                     "install git (your OS package) or put it on PATH", blocking=True, stage=Stage.FETCH)
    if not git.good:
        return Check("git", WRONG, git.problem, "reinstall git", blocking=True, stage=Stage.FETCH)
    return passed("git", git.describe(), Stage.FETCH)


def check_repository(settings: Settings, environ: Mapping[str, str], checkout: Optional[str]) -> Check:
    repo, pin, label = settings.repo, settings.pin, settings.label("repo")
    if checkout is not None:
        return passed("repository", f"the source is already checked out in {checkout}", Stage.FETCH)
    # As the run: a full hash it has is not fetched again; a tag or branch is (it may have moved).
    kept = is_full_hash(pin) and os.path.isdir(os.path.join(settings.root, ".git"))
    fetched = resolve_in(settings.root, pin) if kept else None
    where, _ = rewrite(repo, settings.git_mirrors)
    answered, out, shown = reach(repo, environ, TIMEOUT_S, settings)  # a local repository is only looked at
    if is_local_repo(where):
        path = repo_path(where)
        if answered and not is_repository(path):  # the run's fetch from it fails (exit 2), not its checkout
            answered, out = False, f"{path} is not a git repository"
        if not answered:
            return Check("repository", MISSING, f"{label}={shown}: {out}", f"point {label} at a FlyDSL clone or "
                         "mirror", blocking=fetched is None, stage=Stage.FETCH)
        commit = resolve_in(path, pin)
        if commit is None:
            return Check("repository", WRONG, f"the pin {pin} is not a commit, tag or branch of {shown}", WRONG_PIN,
                         blocking=fetched is None, stage=Stage.CHECKOUT)
        named = f" for {shown_location(repo)}" if where != repo else ""
        return passed("repository", f"local repository {path}{named}; the pin is commit {commit[:12]}", Stage.FETCH)
    if not answered:
        if fetched is not None:
            return Check("repository", MISSING, f"{shown} does not answer ({out}), but the pin is already fetched "
                         f"into {settings.root} (commit {fetched[:12]})", "none needed for this pin",
                         blocking=False, stage=Stage.FETCH)
        return Check("repository", MISSING, f"{shown} does not answer: {out}{no_mirror(repo, settings)}",
                     f"check the network, or point {label} at a reachable mirror (a local path works), or map its "
                     "URL with FLYDSL_GIT_MIRRORS=FROM=TO", blocking=True, stage=Stage.FETCH)
    if is_full_hash(pin):
        return passed("repository", f"{shown} answers (the pin is a commit hash, fetched by hash)", Stage.FETCH)
    if {f"refs/tags/{pin}", f"refs/heads/{pin}"} & set(ref_objects(out)):
        return passed("repository", f"{shown} answers and has {pin}", Stage.FETCH)
    if HEX.match(pin):  # as the run does, after fetching every branch and tag
        return passed("repository", f"{shown} answers (the pin is an abbreviated hash, looked up among every "
                      "branch and tag)", Stage.FETCH)
    return Check("repository", WRONG, f"{shown} answers, but has no tag or branch {pin}", WRONG_PIN, blocking=True,
                 stage=Stage.CHECKOUT)


def check_index(ctx: RunContext, release: bool) -> Check:
    """Whether pip reaches the package index, when something is installed from it."""
    llvm_pip = ctx.llvm and bool(ctx.needs.llvm_pip)
    stage = Stage.RELEASE if release else (Stage.LLVM if llvm_pip else Stage.BUILD)
    asked = ctx.index.asked()
    if not asked and llvm_pip:
        asked = [ctx.index.answer(ctx.needs.llvm_pip[0])]
    if not asked:
        return skipped("package-index", "nothing is installed from it", stage)
    answered = [a for a in asked if a.answered]
    if answered:
        return passed("package-index", f"pip ({ctx.index.python}) answers for "
                      f"{', '.join(a.package for a in answered)}", stage)
    why = "; ".join(f"{a.package}: {a.detail.splitlines()[-1] if a.detail else 'no answer'}" for a in asked)
    needed_by = ("the release wheel" if release else
                 "build_llvm.sh's pip install " + " ".join(ctx.needs.llvm_pip) if llvm_pip
                 else "the private build tools")
    no_pip = all(a.detail.endswith("has no pip") for a in asked)  # not the index's fault: nothing asks it
    remedy = (f"give {ctx.index.python} pip (`{shlex.quote(ctx.index.python)} -m ensurepip --upgrade`)" if no_pip
              else "check the network or pip's configuration (PIP_INDEX_URL, pip.conf); a local mirror works")
    return Check("package-index", MISSING, f"{'no pip asks' if no_pip else 'pip does not reach'} the package index "
                 f"({why}); needed for {needed_by}", remedy, blocking=release or llvm_pip, stage=stage)


# -- the pin's imports: the modules its code imports unconditionally, asked of the interpreter without importing
# them; a run stops there (exit 6) after the fetch, before building; the doctor shows the same finding.
CHECK = "requirements"  # the doctor check's name; its stage is Stage.REQUIREMENTS


@dataclass(frozen=True)
class Finding:
    """What the pin's code needs from the interpreter and what it lacks."""

    python: str
    sources: str  # where the sources were read
    files: int  # the tree's files the walk read
    needed: Tuple[Requirement, ...]  # third-party modules (the standard library left out)
    missing: Tuple[Requirement, ...]
    absent: Tuple[Absent, ...]  # required modules the pin does not have
    require: Tuple[str, ...]
    pin: str

    def names(self, which: Sequence[Requirement]) -> str:
        return ", ".join(r.module for r in which)


def assess(sources: Sources, python: str, require: Sequence[str], environ: Mapping[str, str],
           timeout: float, timeout_label: str, pin: str) -> Finding:
    """Which required modules the sources lack, and which modules outside the tree ``python`` lacks."""
    absent = tuple(absent_modules(require, sources))
    walk = find_requirements(require, sources)
    names = walk.names()
    answer = find_modules(python, names, environ=environ, timeout=timeout, timeout_label=timeout_label) \
        if names else {}
    needed = tuple(r for r in walk.requirements if answer.get(r.module) != "stdlib")
    missing = tuple(r for r in needed if answer.get(r.module) == "missing")
    return Finding(python=python, sources=sources.where, files=len(walk.files), needed=needed, missing=missing,
                   absent=absent, require=tuple(require), pin=pin)


def advised_require(finding: Finding) -> Optional[str]:
    """FLYDSL_REQUIRE with each absent module replaced by the one module of that name the pin has, or None."""
    moved = {a.module: a.instead[0][0] for a in finding.absent if len(a.instead) == 1}
    if len(moved) != len(finding.absent):
        return None
    return ",".join(moved.get(m, m) for m in finding.require)


def absent_reason(finding: Finding) -> str:
    said = []
    for a in finding.absent:
        where, parts = " and ".join(path for _, path in a.instead), a.module.split(".")
        said.append(f"{a.module} is not in {finding.pin}" + (f"; {where} {'is' if len(a.instead) == 1 else 'are'}"
                    if a.instead else f" (no module named {parts[-1]} anywhere in its {parts[0]})"))
    replaced = advised_require(finding)
    return "; ".join(said) + (f": set FLYDSL_REQUIRE={replaced}" if replaced else "")


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
    remedy = (f"install {names} for {finding.python} (for example {install_example(finding.python, names)}; a "
              "package's pip name may differ from its module's, and torch for ROCm comes from its own index), or set "
              "FLYDSL_PYTHON to an interpreter that has them; then run again")
    chains = [f" (reached from {' -> '.join(r.via)})" if r.via else "" for r in finding.missing]
    detail = "\n".join(f"{r.module}: imported by {r.where()}{chain}" for r, chain in zip(finding.missing, chains))
    return reason, remedy, detail


def install_example(python: str, names: str) -> str:
    """A command that installs ``names`` for ``python`` and exists here: its pip, else uv's, else pip first."""
    quoted = shlex.quote(python)
    if has_pip(python):
        return f"`{quoted} -m pip install {names}`"
    if shutil.which("uv"):
        return f"`uv pip install --python {quoted} {names}` ({python} has no pip)"
    return f"`{quoted} -m ensurepip --upgrade` ({python} has no pip), then `{quoted} -m pip install {names}`"


def stop_if_missing(finding: Finding) -> None:
    """The run's stop (exit 6 at stage ``requirements``)."""
    found = problem(finding)
    if found is not None:
        raise EnsureError(ExitCode.PROBE, found[0], stage=Stage.REQUIREMENTS, hint=found[1], detail=found[2])


def summary(finding: Finding) -> str:
    """What a run and the doctor say when the interpreter lacks nothing the pin imports."""
    needed = finding.names(finding.needed) or "nothing outside the tree and the standard library"
    return f"the pin's code ({finding.files} files read from {finding.sources}) imports {needed}; {finding.python} " \
        "has them all"


def check_requirements(settings: Settings, environ: Mapping[str, str], interp: Optional[Interpreter],
                       checkout: Optional[str]) -> Check:
    """The doctor's view of the preflight: blocking when the interpreter lacks a module the pin imports."""
    if interp is None:
        return skipped(CHECK, "the interpreter does not run", Stage.REQUIREMENTS)
    pin = pin_as_tag(settings.pin) if demands(settings.strategy, Way.RELEASE) else settings.pin
    sources = pin_sources(settings.root, settings.repo, pin, checkout, settings.git_mirrors)
    if sources is None:
        return skipped(CHECK, f"the pin's sources cannot be read here yet (no checkout of {pin} in {settings.root}, "
                     f"and {shown_location(settings.repo)} is not a local repository); a run checks them after "
                     "fetching, before downloading or building anything", Stage.REQUIREMENTS)
    try:
        finding = assess(sources, interp.executable, settings.require, environ,
                         settings.probe_timeout, settings.label("probe_timeout"), pin)
    except EnsureError as exc:
        return skipped(CHECK, f"could not ask {interp.executable}: {exc.reason}", Stage.REQUIREMENTS)
    found = problem(finding)
    if found is None:
        return passed(CHECK, summary(finding), Stage.REQUIREMENTS)
    return Check(CHECK, MISSING, found[0], found[1], blocking=True, stage=Stage.REQUIREMENTS)


# -- the run of them --------------------------------------------------------------------------------------
def first_blocking(checks: Sequence[Check]) -> Optional[Check]:
    """The blocking check of the earliest stage: what a run would stop at first."""
    return min((c for c in checks if c.blocking), default=None,
               key=lambda c: len(Stage) if c.stage.order is None else c.stage.order)


def stop_if_blocked(checks: Sequence[Check], strategy: Strategy) -> None:
    """For ``ensure``: raise the doctor's finding (stage "doctor", the failing stage's exit code) before building."""
    first = first_blocking(checks)
    if first is None:
        return
    others = [c.name for c in checks if c.blocking and c is not first]
    more = f" (also blocking: {', '.join(others)})" if others else ""
    raise EnsureError(
        ExitCode(first.exit_code),
        f"checked before building: the {strategy} strategy cannot succeed here; {first.name}: {first.detail}",
        stage=Stage.DOCTOR,
        hint=f"{first.remedy}{more}; `{command('doctor')}` lists every check",
        detail="\n".join(line for c in checks if c.blocking for line in render_check(c)),
    )


def run_checks(settings: Settings, environ: Mapping[str, str], *, checkout: Optional[str] = None,
               reuse: Optional[ReuseCheck] = None, interpreter: Optional[Interpreter] = None
               ) -> Tuple[List[Check], Optional[BuildNeeds], Optional[Interpreter]]:
    """Every check the strategy depends on, in the order a run meets them, the build's needs (None: no build) and
    the target interpreter (None: it does not run; ``interpreter``: as the caller just described it)."""
    strategy = settings.strategy
    with concurrent.futures.ThreadPoolExecutor(max_workers=10, thread_name_prefix="doctor") as pool:
        submit: Submit = pool.submit
        f_interp = pool.submit(check_interpreter, settings, environ, interpreter)
        builds, fetches = tries(strategy, Way.SOURCE), provisions(strategy)
        # a local mirror's sources can be read before any fetch
        f_needs = pool.submit(find_needs, settings.root, settings.repo, settings.pin, checkout, environ,
                              settings.git_mirrors) if builds else None
        early = [submit(check_root, settings), submit(check_git, environ),
                 submit(check_repository, settings, environ, checkout)] if fetches else []
        interp_check, interp = f_interp.result()
        needs = f_needs.result() if f_needs is not None else KNOWN_FLYDSL_NEEDS
        llvm = builds and llvm_step_needed(settings, needs, interp)
        # Whose pip asks the index: this tool's interpreter (it installs the private tools), else the target's.
        installer = sys.executable if has_pip(sys.executable) else interp.executable if interp else settings.python
        ctx = RunContext(settings=settings, environ=environ, timeout=TIMEOUT_S, interpreter=interp, needs=needs,
                         llvm=llvm, index=Index(installer, environ, TIMEOUT_S))
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
            # auto installs an available release wheel and builds nothing: what blocks only a build does not block
            note = f" (only for a source build: auto installs the release wheel, {wheel.detail.split('; ')[-1]})"
            checks = [replace(c, blocking=False, remedy=c.remedy + note) if c.blocking and c.stage in SOURCE_ONLY
                      else c for c in checks]
        return checks, needs if builds else None, interp


# -- the verdict ------------------------------------------------------------------------------------------
DOCTOR_SCHEMA_VERSION = 1  # of `doctor --json`'s shape: a new key keeps it, a changed meaning does not


@dataclass(frozen=True)
class Diagnosis:
    strategy: Strategy
    checks: Tuple[Check, ...]
    needs: Optional[BuildNeeds]
    seconds: float
    suggestion: Optional[str] = None  # auto's way around a blocked source build

    @property
    def reusable(self) -> bool:
        return any(c.name == "reuse" and c.status == OK for c in self.checks)

    @property
    def ok(self) -> bool:
        return self.reusable or first_blocking(self.checks) is None

    @property
    def exit_code(self) -> int:
        first = first_blocking(self.checks)
        return 0 if self.ok or first is None else first.exit_code

    def verdict(self) -> str:
        first = first_blocking(self.checks)
        if self.reusable:
            tail = f"; a new build could not: {first.name}: {first.detail}" if first else ""
            return f"the configured strategy ({self.strategy}) can succeed here: a reusable FlyDSL is there{tail}"
        if first is None:
            return f"the configured strategy ({self.strategy}) can succeed here"
        instead = f"; or, without a build, {self.suggestion}" if self.suggestion else ""
        return (f"the configured strategy ({self.strategy}) cannot succeed here: {first.name}: {first.detail} "
                f"(a run would stop at its {first.stage} step, exit {first.exit_code}){instead}")

    def report(self, settings: Settings, as_json: bool) -> str:
        """What `doctor` prints: one JSON object (docs/schema/doctor.schema.json), or a line per check, the verdict."""
        if as_json:
            return json.dumps({"strategy": self.strategy.value, "ok": self.ok, "exit_code": self.exit_code,
                               "verdict": self.verdict(), "needs": asdict(self.needs) if self.needs else None,
                               "checks": [asdict(c) for c in self.checks], "seconds": round(self.seconds, 3),
                               "suggestion": self.suggestion, "schema_version": DOCTOR_SCHEMA_VERSION,
                               "root": settings.root, "python": settings.python, "repo": shown_location(settings.repo),
                               "pin": settings.pin}, sort_keys=True)
        lines = [f"ensure-flydsl doctor: strategy {settings.strategy}, root {settings.root}, python {settings.python}"]
        if self.needs is not None:
            lines.append(f"  the build needs {self.needs.summary()} (read from {self.needs.source})")
        width = max(len(c.name) for c in self.checks)
        lines += [line for check in self.checks for line in render_check(check, width)]
        lines.append(("ok: " if self.ok else "NOT OK: ") + self.verdict() + f"  [{self.seconds:.1f} s]")
        if not self.ok:
            lines.append("  (UPPERCASE: blocks this strategy; provide: missing here, ensure-flydsl provides it "
                         "privately)")
        return "\n".join(lines)


def diagnose(settings: Settings, environ: Mapping[str, str], *, reuse: Optional[ReuseCheck] = None) -> Diagnosis:
    started = time.monotonic()
    checks, needs, interp = run_checks(settings, environ, reuse=reuse)
    shadows = shadowing(settings.require)
    checks += [check_flydsl_users(settings, environ),
               Check("working-folder", WRONG if shadows else OK, "; ".join(shadows) or "nothing in it shadows the "
                     "tree", "", blocking=False, stage=Stage.PUBLISH)]
    diagnosis, blocking = Diagnosis(settings.strategy, tuple(checks), needs, 0.0), first_blocking(checks)
    if not diagnosis.ok and blocking and blocking.stage in SOURCE_ONLY and interp and falls_back(settings.strategy):
        diagnosis = replace(diagnosis, suggestion=release_suggestion(settings, interp, environ))  # auto's way around
    return replace(diagnosis, seconds=time.monotonic() - started)


def render_check(check: Check, width: int = 15) -> List[str]:
    # UPPERCASE blocks the configured strategy; "provide": missing here but provided by the tool
    label = {OK: "ok", SKIPPED: "skip"}.get(check.status) or ("provide" if check.provided else
                                                              check.status.upper() if check.blocking else check.status)
    lines = [f"  [{label}]".ljust(12) + f"{check.name.ljust(width)} {check.detail}"]
    if check.status not in (OK, SKIPPED) and check.remedy:
        lines.append(" " * (12 + width + 1) + f"remedy: {check.remedy}")
    return lines
