"""The doctor's shared checks that ask something of the network or of git: the repository and the pin, and
the package index (the release wheel's and the build tools').  Each has a short timeout; the doctor runs
them concurrently (see diagnose.py).  The ways' own checks are in their packages (``ways/*/checks.py``)."""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from ensure_flydsl.errors import Stage
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import is_local_repo
from ensure_flydsl.source.mirrors import describe, rewrite
from ensure_flydsl.source.needs import resolve_in
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, RunContext, local_path, no_mirror, passed, reach, skipped


def _root_has(root: str, pin: str) -> Optional[str]:
    return resolve_in(root, pin) if os.path.isdir(os.path.join(root, ".git")) else None


def check_repository(settings: Settings, environ: Mapping[str, str], timeout: float,
                     checkout: Optional[str]) -> Check:
    repo, pin, label = settings.repo, settings.pin, settings.label("repo")
    if checkout is not None:
        return passed("repository", f"the source is already checked out in {checkout}", Stage.FETCH)
    fetched = _root_has(settings.root, pin)
    where, _ = rewrite(repo, settings.git_mirrors)
    shown = describe(repo, settings.git_mirrors, settings.label("git_mirrors"))
    if is_local_repo(where):
        path = local_path(where)
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
    answered, out, _ = reach(repo, environ, timeout, settings)
    if not answered:
        if fetched is not None:
            return Check(name="repository", status=MISSING,
                         detail=f"{shown} does not answer ({out}), but the pin is already fetched "
                         f"into {settings.root} (commit {fetched[:12]})", remedy="none needed for this pin",
                         blocking=False,
                         stage=Stage.FETCH)
        return Check(name="repository", status=MISSING,
                     detail=f"{shown} does not answer: {out}{no_mirror(repo, settings)}",
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


