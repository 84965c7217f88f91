"""The doctor's checks that ask something of the network or of git: the repository and the pin, the pin's
submodules, where LLVM's source comes from, the package index, and a release wheel for the interpreter.
Each has a short timeout; the doctor runs them concurrently (see diagnose.py)."""

from __future__ import annotations

import os
import re
import subprocess
from typing import List, Mapping, Optional, Tuple

from ensure_flydsl.doctor.local_checks import (
    RunContext,
)
from ensure_flydsl.doctor.verdict import MISSING, WRONG, Check, passed, skipped
from ensure_flydsl.errors import EnsureError, Stage
from ensure_flydsl.layout import llvm_dir
from ensure_flydsl.setting_values import GitMirrors
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import is_local_repo, ls_remote_within, read_git
from ensure_flydsl.source.mirrors import describe, rewrite
from ensure_flydsl.source.needs import resolve_in
from ensure_flydsl.support.processes import CommandFailed
from ensure_flydsl.wheels.download import release_pip
from ensure_flydsl.wheels.package_index import best_version
from ensure_flydsl.wheels.release import pin_as_tag, release_tags, tag_version, wheel_tags


def _ls_remote(url: str, environ: Mapping[str, str], timeout: float, *refs: str,
               mirrors: GitMirrors) -> Tuple[bool, str]:
    """Whether ``git ls-remote url`` answers within the timeout (through the mirrors, as git rewrites the
    URL itself); (ok, output or the reason)."""
    try:
        proc = ls_remote_within(url, refs, environ, mirrors, timeout)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return False, f"cannot run git: {exc.strerror}"
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return False, lines[-1] if lines else f"git ls-remote exited with {proc.returncode}"
    return True, proc.stdout.decode(errors="replace")


def _root_has(root: str, pin: str) -> Optional[str]:
    return resolve_in(root, pin) if os.path.isdir(os.path.join(root, ".git")) else None


def _local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _reach(url: str, environ: Mapping[str, str], timeout: float, settings: Settings,
           *refs: str) -> Tuple[bool, str, str]:
    """Whether git can fetch from ``url`` (through the mirrors): (it can, ls-remote's output or why not,
    the URL and the mirror that serves it, for messages).  A local target is only looked at."""
    mirrors = settings.git_mirrors
    where, _ = rewrite(url, mirrors)
    how = describe(url, mirrors, settings.label("git_mirrors"))
    if is_local_repo(where):
        path = _local_path(where)
        return os.path.isdir(path), "" if os.path.isdir(path) else f"{path} does not exist", how
    answered, out = _ls_remote(url, environ, timeout, *refs, mirrors=mirrors)
    return answered, out, how


def _no_mirror(url: str, settings: Settings) -> str:
    """For a URL that cannot be fetched: that no mirror covers it, when mirrors are set."""
    if settings.git_mirrors and rewrite(url, settings.git_mirrors)[1] is None:
        return f"; no {settings.label('git_mirrors')} pair covers it"
    return ""


def check_repository(settings: Settings, environ: Mapping[str, str], timeout: float,
                     checkout: Optional[str]) -> Check:
    repo, pin, label = settings.repo, settings.pin, settings.label("repo")
    if checkout is not None:
        return passed("repository", f"the source is already checked out in {checkout}", Stage.FETCH)
    fetched = _root_has(settings.root, pin)
    where, _ = rewrite(repo, settings.git_mirrors)
    shown = describe(repo, settings.git_mirrors, settings.label("git_mirrors"))
    if is_local_repo(where):
        path = _local_path(where)
        if not os.path.isdir(path):
            return Check(name="repository", status=MISSING, detail=f"{label}={shown}: {path} does not exist",
                         remedy=f"point {label} at a FlyDSL clone or mirror", blocking=fetched is None,
                         stage=Stage.FETCH)
        commit = resolve_in(path, pin)
        if commit is None:
            return Check(name="repository", status=WRONG,
                         detail=f"the pin {pin} is not a commit, tag or branch of {shown}",
                         remedy="check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)",
                         blocking=fetched is None,
                         stage=Stage.CHECKOUT)
        return passed("repository", f"local repository {path}{' for ' + repo if where != repo else ''}; the pin is "
                   f"commit {commit[:12]}", Stage.FETCH)
    answered, out, _ = _reach(repo, environ, timeout, settings)
    if not answered:
        if fetched is not None:
            return Check(name="repository", status=MISSING,
                         detail=f"{shown} does not answer ({out}), but the pin is already fetched "
                         f"into {settings.root} (commit {fetched[:12]})", remedy="none needed for this pin",
                         blocking=False,
                         stage=Stage.FETCH)
        return Check(name="repository", status=MISSING,
                     detail=f"{shown} does not answer: {out}{_no_mirror(repo, settings)}",
                     remedy=f"check the network, or point {label} at a reachable mirror (a local path works), "
                     "or map its URL with FLYDSL_GIT_MIRRORS=FROM=TO", blocking=True, stage=Stage.FETCH)
    if re.fullmatch(r"[0-9a-fA-F]{40}", pin):
        return passed("repository", f"{shown} answers (the pin is a commit hash, fetched by hash)", Stage.FETCH)
    refs = {line.split("\t", 1)[1].strip() for line in out.splitlines() if "\t" in line}
    if {f"refs/tags/{pin}", f"refs/heads/{pin}"} & refs:
        return passed("repository", f"{shown} answers and has {pin}", Stage.FETCH)
    return Check(name="repository", status=WRONG, detail=f"{shown} answers, but has no tag or branch {pin}",
                 remedy="check FLYDSL_PIN (a full commit hash or a tag such as v0.2.2)", blocking=True,
                 stage=Stage.CHECKOUT)


def check_llvm_source(ctx: RunContext) -> Check:
    needs = ctx.needs
    if not ctx.llvm:
        return skipped("llvm-source", "no LLVM build", Stage.LLVM)
    if needs.llvm_remote is None:
        return skipped("llvm-source", "build_llvm.sh does not clone llvm-project", Stage.LLVM)
    commit = needs.llvm_commit
    local = llvm_dir(ctx.settings.base_dir)
    if commit and os.path.isdir(os.path.join(local, ".git")) and resolve_in(local, commit):
        return passed("llvm-source", f"LLVM {commit[:12]} is already in {local}", Stage.LLVM)
    remote = ctx.environ.get("LLVM_REMOTE") or needs.llvm_remote
    named = f"named in {needs.llvm.commit_from}" if needs.llvm is not None else "the pin names"
    remedy = (f"set MLIR_PATH to an MLIR install built from LLVM {commit[:12] if commit else 'at the pin'} "
              f"({named}), or LLVM_REMOTE to a reachable mirror of llvm-project (or map its URL "
              "with FLYDSL_GIT_MIRRORS=FROM=TO)")
    answered, out, shown = _reach(remote, ctx.environ, ctx.timeout, ctx.settings, "HEAD")
    if answered:
        return passed("llvm-source", f"build_llvm.sh clones LLVM from {shown}, which answers", Stage.LLVM)
    return Check(name="llvm-source", status=MISSING,
                 detail=f"build_llvm.sh clones LLVM from {shown}, which cannot be fetched: {out}"
                 f"{_no_mirror(remote, ctx.settings)}", remedy=remedy, blocking=True, stage=Stage.LLVM)


def _submodule_url(url: str, repo: str) -> str:
    """A submodule URL as git resolves it: ``../x`` and ``./x`` are relative to the superproject's URL."""
    if not url.startswith(("./", "../")):
        return url
    base = repo.rstrip("/")
    for part in url.split("/"):
        if part == "..":
            base = base.rsplit("/", 1)[0] if "/" in base else base
        elif part not in (".", ""):
            base = f"{base}/{part}"
    return base


def check_submodules(ctx: RunContext, checkout: Optional[str]) -> Check:
    """A source build fetches the pin's submodules first: those whose repository does not answer stop it."""
    subs = ctx.needs.submodules
    if not ctx.needs.read:
        return skipped("submodules", "the pin's source could not be read (see the repository check)", Stage.SUBMODULES)
    if not subs:
        return skipped("submodules", "the pin has no submodules", Stage.SUBMODULES)
    unreachable: List[str] = []
    served: List[str] = []
    for path, url in subs:
        if any(top and os.path.exists(os.path.join(top, path, ".git")) for top in (checkout, ctx.settings.root)):
            served.append(f"{path} (already fetched)")
            continue
        where = _submodule_url(url, ctx.settings.repo)
        answered, out, shown = _reach(where, ctx.environ, ctx.timeout, ctx.settings, "HEAD")
        served.append(f"{path} from {shown}")
        if not answered:
            local = is_local_repo(rewrite(where, ctx.settings.git_mirrors)[0])
            unreachable.append(f"{path} ({out})" if local and shown == where else
                               f"{path} ({shown}: {out}{_no_mirror(where, ctx.settings)})")
    if unreachable:
        return Check(name="submodules", status=MISSING,
                     detail="the pin's submodules cannot be fetched: " + "; ".join(unreachable),
                     remedy="make them reachable, or mirror them and map their URLs with FLYDSL_GIT_MIRRORS=FROM=TO "
                     "(a URL prefix, such as https://github.com/=https://git.example.internal/github/)", blocking=True,
                     stage=Stage.SUBMODULES)
    return passed("submodules", f"{len(subs)} submodule(s) can be fetched: " + ", ".join(served), Stage.SUBMODULES)


def check_index(ctx: RunContext, release: bool) -> Check:
    """Whether pip reaches the package index; needed when something is installed from it."""
    stage = Stage.RELEASE if release else (Stage.LLVM if ctx.llvm and ctx.needs.llvm_pip else Stage.BUILD)
    asked = ctx.index.asked()
    if not asked and ctx.llvm and ctx.needs.llvm_pip:
        asked = [ctx.index.answer(ctx.needs.llvm_pip[0])]
    if not asked:
        return skipped("package-index", "nothing is installed from it", stage)
    answered = [a for a in asked if a.answered]
    if answered:
        return passed("package-index", f"pip ({ctx.index.python}) answers for {', '.join(a.package for a in answered)}",
                   stage)
    why = "; ".join(f"{a.package}: {a.detail.splitlines()[-1] if a.detail else 'no answer'}" for a in asked)
    needed_by = ("the release wheel" if release else
                 "build_llvm.sh's pip install " + " ".join(ctx.needs.llvm_pip) if ctx.llvm and ctx.needs.llvm_pip
                 else "the private build tools")
    blocking = release or (ctx.llvm and bool(ctx.needs.llvm_pip))
    return Check(name="package-index", status=MISSING,
                 detail=f"pip does not reach the package index ({why}); needed for {needed_by}",
                 remedy="check the network or pip's configuration (PIP_INDEX_URL, pip.conf); a local mirror works",
                 blocking=blocking, stage=stage)


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
        return Check(name="release-wheel", status=WRONG, detail=how,
                     remedy="pin a release tag (for example v0.2.2) or a version, or use "
                     "FLYDSL_STRATEGY=source", blocking=True, stage=Stage.RELEASE)
    try:
        options = wheel_tags(ctx.interpreter)
    except EnsureError as exc:
        return Check(name="release-wheel", status=WRONG, detail=exc.reason,
                     remedy="use a CPython interpreter, or FLYDSL_STRATEGY=source",
                     blocking=demanded, stage=Stage.RELEASE)
    pip, no_pip = release_pip(ctx.interpreter.executable, ctx.environ)  # the pip ensure downloads with
    fallback = "" if demanded else "; auto builds from source instead"
    if pip is None:
        return Check(name="release-wheel", status=MISSING, detail=f"{how}, but {no_pip}{fallback}",
                     remedy="give the interpreter pip, or use FLYDSL_STRATEGY=source", blocking=demanded,
                     stage=Stage.RELEASE)
    answer = ctx.index.answer("flydsl", options, python=pip)
    wanted = f"flydsl=={version}" if version else f"flydsl >= {ctx.settings.min_version}"
    abi = options[options.index("--abi") + 1]
    if not answer.answered:
        return Check(name="release-wheel", status=MISSING,
                     detail=f"cannot ask the package index for {wanted}: {answer.detail}",
                     remedy="check the network or pip's configuration (PIP_INDEX_URL, pip.conf)", blocking=demanded,
                     stage=Stage.RELEASE)
    found = best_version(answer.versions, exact=version, minimum=None if version else ctx.settings.min_version)
    if found:
        return passed("release-wheel", f"{how}; the package index has a flydsl {found} wheel for {abi}", Stage.RELEASE)
    listed = ", ".join(answer.versions[:5]) or "none"
    return Check(name="release-wheel", status=MISSING,
                 detail=f"{how}, but the package index has no {wanted} wheel for {abi} "
                 f"(versions it has for {abi}: {listed}){fallback}",
                 remedy="use FLYDSL_STRATEGY=source to build the pin, "
                 "or set FLYDSL_PYTHON to an interpreter FlyDSL publishes wheels for (cp310-cp314)", blocking=demanded,
                 stage=Stage.RELEASE)


