"""The release way: the pin's ``flydsl==X`` wheel, installed only when its package is the checkout's ``python/flydsl``
file by file (a tag's name proves nothing); under ``auto`` one that is not, or does not work, gives way to a build."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import Version

from ensure_flydsl import layout
from ensure_flydsl.errors import EnsureError, ExitCode, Plan, Stage
from ensure_flydsl.probe.gate import TREE_PACKAGES
from ensure_flydsl.probe.results import Interpreter, Probe
from ensure_flydsl.result import How
from ensure_flydsl.settings import Settings
from ensure_flydsl.source import requirements
from ensure_flydsl.source.git import Checkout, failing_as, local_repositories, pin_commits, read_git
from ensure_flydsl.support import faults
from ensure_flydsl.support.files import remove_tree, rename_into_place
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.ways import Way, demands
from ensure_flydsl.ways.base import Early, Provider, Shared
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, CheckStatus, RunContext, Submit, passed, skipped
from ensure_flydsl.ways.context import Decision, Run
from ensure_flydsl.ways.package_index import newest_first, query_versions
from ensure_flydsl.ways.release import wheels
from ensure_flydsl.ways.release.download import WheelDownload, release_pip, wheel_tags
from ensure_flydsl.ways.tree import TreeDoesNotImport, building, verify_tree

_NO_MODULE = re.compile(r"^ModuleNotFoundError: No module named '([^']+)'")
_FLYDSL_MODULE = re.compile(r"'(flydsl(?:\.\w+)+)'")


class Refused(EnsureError):
    """The index's wheel is not built from the pin's sources, or fails the probe for a reason inside it."""


@dataclass
class ReleaseProvider(Provider):
    way = Way.RELEASE
    route = Plan.RELEASE
    version: str
    early: Early  # the wheel downloaded beside the fetch, the probe started for it
    demanded: bool  # FLYDSL_STRATEGY=release: no wheel is the run's failure (exit 8)

    @classmethod
    def for_run(cls, run: Run, shared: Shared) -> Optional[ReleaseProvider]:
        demanded = demands(run.settings.strategy, Way.RELEASE)
        if shared.release is not None:
            return cls(shared.release, shared.early, demanded=demanded)
        if demanded:
            raise EnsureError(ExitCode.ARTIFACT, f"the pin {run.settings.pin} (commit {shared.commit[:12]}) is not "
                              "the commit of a release tag vX.Y.Z", stage=Stage.RELEASE,
                              hint="pin a release tag (for example v0.2.2) or a version (0.2.2), or use "
                              "FLYDSL_STRATEGY=source")
        return None

    @staticmethod
    def predict(ctx: RunContext, checkout: Optional[str], submit: Submit) -> List[concurrent.futures.Future[Check]]:
        return [submit(check_release, ctx, checkout, demanded=demands(ctx.settings.strategy, Way.RELEASE))]

    def provide(self, run: Run, commit: str) -> Optional[Decision]:
        try:
            return self._provide(run, commit)
        except EnsureError as exc:
            refused = isinstance(exc, Refused)  # said as it is
            if self.demanded or not (refused or exc.code == ExitCode.ARTIFACT):
                raise
            run.say(f"{exc.reason if refused else f'no release wheel to use ({exc.reason})'}; building the pin from "
                    "source instead")
            return None

    def _provide(self, run: Run, commit: str) -> Decision:
        run.plan(Plan.RELEASE)
        key: Dict[str, object] = {"release": self.version, "commit": commit, "abi": run.interpreter.abi}
        with run.step(Stage.RELEASE):
            self._install(run, commit, key)
        with run.step(Stage.VERIFY):
            try:
                return verify_tree(run, commit, How.RELEASED, self.early)
            except EnsureError as exc:
                run.stamps.undo("build")
                root = run.settings.root
                fault = wheel_fault(exc.probe, layout.packages_dir(root), os.path.join(root, layout.FLYDSL_SOURCES)
                                    ) if isinstance(exc, TreeDoesNotImport) else None
                if fault is None or self.demanded:
                    raise
                remove_tree(layout.packages_dir(root))  # what the wheel installed: the build starts clean
                raise Refused(
                    ExitCode.PROBE, f"the flydsl {self.version} wheel does not work with "
                    f"{run.interpreter.executable}: {fault}", stage=Stage.VERIFY) from None

    def _install(self, run: Run, commit: str, key: Dict[str, object]) -> None:
        root, version = run.settings.root, self.version
        packages = layout.packages_dir(root)
        if run.stamps.done("build", key) and os.path.isdir(packages):
            run.say(f"the flydsl {version} wheel is already installed in {packages}")
            return
        wheels.check_versions("v" + version, root)
        download, staging = layout.wheel_download_dir(root), layout.wheel_staging_dir(root)
        with building(run, key):
            run.worked()
            remove_tree(staging)  # a leftover of an interrupted run of ours
            try:
                wheel = self._download(run, download)
                run.facts.add_fetched("wheel", os.path.getsize(wheel))
                self._prove(run, commit, wheel)
                run.say(f"release v{version}: installing {os.path.basename(wheel)}")
                try:
                    wheels.install_wheel_file(run.interpreter, wheel, version, staging, run.build_line)
                except EnsureError:
                    remove_tree(staging)  # the part written before a file failed its RECORD check
                    raise
            finally:
                remove_tree(download)
            faults.point("release-installed")
            wheels.check_versions("v" + version, root, staging)
            remove_tree(packages)
            rename_into_place(staging, packages)
        run.stamps.finish("build", key)

    def _download(self, run: Run, folder: str) -> str:
        """The wheel's path: from the download started beside the fetch, or downloaded now."""
        version, early = self.version, self.early.download
        if early is not None and early.version == version:
            run.say(f"release v{version}: taking the flydsl=={version} wheel downloaded beside the fetch")
            return early.wheel(run.build_line)
        if early is not None:
            early.abort()
        remove_tree(folder)  # what it downloaded, or a leftover of an interrupted run of ours
        run.say(f"release v{version}: downloading the flydsl=={version} wheel for {run.interpreter.executable}")
        return WheelDownload(run.interpreter, version, folder, run.environ).wheel(run.build_line)

    def _prove(self, run: Run, commit: str, wheel: str) -> None:
        """Refuse a wheel whose package is not the checkout's ``python/flydsl``, before installing any of it."""
        settings = run.settings
        files = tracked_sources(Checkout.of(settings, run.environ), commit)
        found = wheels.check_provenance(wheel, os.path.join(settings.root, layout.FLYDSL_SOURCES), files)
        if found.foreign and not (found.differ or found.missing):
            raise Refused(ExitCode.ARTIFACT, f"the index's flydsl {self.version} wheel holds {len(found.foreign)} "
                            f"files a FlyDSL wheel must not hold, e.g. {found.foreign[0]}", stage=Stage.RELEASE,
                            hint="other top-level names, .pth files, site customisation, bytecode or modules that "
                            "shadow the pin's sources would run code the pin does not have; use "
                            "FLYDSL_STRATEGY=source to build the pin")
        if not found.proven:
            raise Refused(ExitCode.ARTIFACT, f"the index's flydsl {self.version} is not built from "
                            f"{shown_location(settings.repo)} v{self.version}: {found.summary()}", stage=Stage.RELEASE,
                            hint="the package index's wheel comes from other sources than the pin; use "
                            "FLYDSL_STRATEGY=source to build the pin (or FLYDSL_REPO of the repository the wheel "
                            "is built from)")
        run.say(f"release v{self.version}: {os.path.basename(wheel)} is built from the pin: {found.summary()} "
                f"in {layout.FLYDSL_SOURCES}")


def tracked_sources(checkout: Checkout, commit: str) -> List[str]:
    """The files git tracks in ``python/flydsl`` at ``commit``, relative to it (no submodules)."""
    prefix = layout.FLYDSL_SOURCES + "/"
    with failing_as(ExitCode.CHECKOUT, f"cannot list {layout.FLYDSL_SOURCES} of {commit[:12]} in {checkout.root}",
                    stage=Stage.RELEASE, hint="the checkout is damaged; look at `git -C ROOT status`"):
        out = checkout.git("ls-tree", "-r", "-z", "--full-tree", commit, "--", prefix)
    entries = (entry.partition("\t") for entry in out.split("\0"))
    return [path[len(prefix):] for meta, _, path in entries
            if meta.split(" ")[1:2] == ["blob"] and path.startswith(prefix)]


def wheel_fault(probe: Probe, packages: str, sources: str) -> Optional[str]:
    """The failure of ``probe`` when its cause is what the wheel adds to the pin's ``sources`` (a generated
    ``_mlir`` for another ABI); None otherwise, e.g. for a missing third-party module that a build lacks too."""
    failed = [m for m in probe.modules if m.error or not m.file]
    missing = (_NO_MODULE.match(m.error or "") for m in failed)
    if any(found and found.group(1).split(".")[0] not in TREE_PACKAGES for found in missing):
        return None
    return next((f"{m.name} does not import: {m.error}" for m in failed
                 if m.error and _names_generated(m.error, packages, sources)), None)


def _names_generated(error: str, packages: str, sources: str) -> bool:
    """The error names a module the wheel has and the sources do not (``No module named 'flydsl._mlir...'``), or a
    file the wheel installed that is not one of the pin's sources (``...so: file too short``)."""
    for name in _FLYDSL_MODULE.findall(error):
        parts = name.split(".")[1:]
        if os.path.exists(os.path.join(sources, *parts) + ".py") or os.path.isdir(os.path.join(sources, *parts)):
            continue
        folder, leaf = os.path.join(packages, "flydsl", *parts[:-1]), parts[-1]
        with contextlib.suppress(OSError):
            if any(entry == leaf or entry.startswith(leaf + ".") for entry in os.listdir(folder)):
                return True
    installed = (rel for top in {packages, os.path.realpath(packages)}
                 for rel in re.findall(re.escape(top + os.sep) + r"([^:\s)'\"]+)", error))
    return any(not rel.startswith("flydsl/") or not os.path.isfile(os.path.join(sources, rel[len("flydsl/"):]))
               for rel in installed)


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


def release_suggestion(settings: Settings, interpreter: Interpreter, environ: Mapping[str, str]) -> Optional[str]:
    """``auto``'s hint when a build cannot succeed, or None: the newest other release whose wheel the index has for the
    interpreter, that passes the floor and whose tag holds every FLYDSL_REQUIRE module."""
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
    source = Checkout.of(settings, environ)
    answer = requirements.release_holding(source, versions, modules, SUGGEST_TIMEOUT_S)
    text = suggestion_text(answer, modules, source.shown)
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
