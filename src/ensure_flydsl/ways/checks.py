"""What the doctor's checks share: a check's answer, the context they look at, and their reach of the network
(the package index, asked once each; git remotes, through the mirrors)."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ensure_flydsl.errors import ExitCode, Stage, StrEnum
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import describe, is_local_repo, ls_remote_within, repo_path, rewrite
from ensure_flydsl.source.needs import BuildNeeds
from ensure_flydsl.ways.package_index import IndexAnswer, query_versions


class CheckStatus(StrEnum):

    OK = "ok"
    MISSING = "missing"
    WRONG = "wrong"
    SKIPPED = "skipped"


OK, MISSING, WRONG, SKIPPED = CheckStatus.OK, CheckStatus.MISSING, CheckStatus.WRONG, CheckStatus.SKIPPED


@dataclass(frozen=True)
class Check:
    """One thing the configured strategy needs, and what this machine has of it."""

    name: str
    status: CheckStatus
    detail: str
    remedy: str
    blocking: bool  # the configured strategy cannot succeed while this stands
    stage: Stage  # the run's step that would fail: settings, fetch, checkout, requirements, llvm, build, ...
    provided: bool = False  # missing here, but ensure-flydsl provides it (private toolchain, hip overlay)

    @property
    def exit_code(self) -> int:
        return int(self.stage.exit_code or ExitCode.INTERNAL)


def passed(name: str, detail: str, stage: Stage) -> Check:
    return Check(name=name, status=OK, detail=detail, remedy="", blocking=False, stage=stage)


def skipped(name: str, detail: str, stage: Stage) -> Check:
    return Check(name=name, status=SKIPPED, detail=detail, remedy="", blocking=False, stage=stage)


class Index:
    """Package index answers, each asked once (concurrent askers wait for the first)."""

    def __init__(self, python: str, environ: Mapping[str, str], timeout: float) -> None:
        self.python = python
        self.environ = environ
        self.timeout = timeout
        self._lock = threading.Lock()
        self._answers: Dict[Tuple[str, Tuple[str, ...], str], "concurrent.futures.Future[IndexAnswer]"] = {}

    def answer(self, package: str, options: Sequence[str] = (), python: Optional[str] = None) -> IndexAnswer:
        """What the index has for ``package``, asked through ``python``'s pip (default: the installer's)."""
        python = python or self.python
        mine: "concurrent.futures.Future[IndexAnswer]" = concurrent.futures.Future()
        with self._lock:
            future = self._answers.setdefault((package, tuple(options), python), mine)
        if future is mine:
            try:
                future.set_result(query_versions(python, package, self.environ, timeout=self.timeout,
                                                 options=options))
            except BaseException as exc:  # never leave the other askers waiting
                future.set_exception(exc)
        return future.result()

    def asked(self) -> List[IndexAnswer]:
        with self._lock:
            futures = list(self._answers.values())
        return [f.result() for f in futures]


@dataclass
class RunContext:
    settings: Settings
    environ: Mapping[str, str]
    timeout: float
    interpreter: Optional[Interpreter]
    needs: BuildNeeds
    llvm: bool  # the LLVM/MLIR step will run
    index: Index

    @property
    def heavy(self) -> bool:
        return self.llvm and (self.needs.llvm_cmake or self.needs.llvm_remote is not None)

    @property
    def compiles(self) -> bool:
        return self.needs.cmake or self.heavy

    def tool_stage(self) -> Stage:
        return Stage.LLVM if self.heavy else Stage.BUILD


def reach(url: str, environ: Mapping[str, str], timeout: float, settings: Settings,
          *refs: str) -> Tuple[bool, str, str]:
    """Whether git can fetch from ``url`` through the mirrors: (it can, ls-remote's output or why not, the URL
    and the mirror that serves it).  A local target is only looked at."""
    mirrors = settings.git_mirrors
    where, _ = rewrite(url, mirrors)
    how = describe(url, mirrors, settings.label("git_mirrors"))
    if is_local_repo(where):
        path = repo_path(where)
        return os.path.isdir(path), "" if os.path.isdir(path) else f"{path} does not exist", how
    try:  # git rewrites the URL itself
        proc = ls_remote_within(url, refs, environ, mirrors, timeout)
    except subprocess.TimeoutExpired:
        return False, f"no answer within {timeout:.0f} s", how
    except OSError as exc:
        return False, f"cannot run git: {exc.strerror}", how
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        return False, lines[-1] if lines else f"git ls-remote exited with {proc.returncode}", how
    return True, proc.stdout.decode(errors="replace"), how


def no_mirror(url: str, settings: Settings) -> str:
    """For a URL that cannot be fetched: that no mirror covers it, when mirrors are set."""
    if settings.git_mirrors and rewrite(url, settings.git_mirrors)[1] is None:
        return f"; no {settings.label('git_mirrors')} pair covers it"
    return ""


Submit = Callable[..., "concurrent.futures.Future[Check]"]


def settled(check: Check) -> "concurrent.futures.Future[Check]":
    """A check made at once, as a future beside the submitted ones."""
    future: "concurrent.futures.Future[Check]" = concurrent.futures.Future()
    future.set_result(check)
    return future
