"""Exit codes and the one user-facing error type.

Every failure the tool reports is an :class:`EnsureError` carrying the exit code of the contract
(the README's exit-code table), the stage it happened in, a one-line reason and what to do next.  The CLI's
top-level handler maps it, Ctrl-C and bugs to distinct exit codes.
"""

from __future__ import annotations

import enum
from typing import Dict, Optional


class ExitCode(enum.IntEnum):
    OK = 0
    FETCH = 2
    CHECKOUT = 3
    LLVM_BUILD = 4
    FLYDSL_BUILD = 5
    PROBE = 6
    LOCK = 7
    ARTIFACT = 8
    WORKER_DIED = 9
    BAD_INPUT = 64
    INTERNAL = 70
    STILL_RUNNING = 75
    INTERRUPTED = 130


EXIT_MEANINGS = {
    ExitCode.OK: "usable and env file written",
    ExitCode.FETCH: "clone/fetch failed",
    ExitCode.CHECKOUT: "checkout of the pin failed",
    ExitCode.LLVM_BUILD: "LLVM/MLIR build failed",
    ExitCode.FLYDSL_BUILD: "FlyDSL build failed",
    ExitCode.PROBE: "built but the import probe still fails, or the interpreter lacks a module the pin imports",
    ExitCode.LOCK: "lock not acquired",
    ExitCode.ARTIFACT: "release or cache artifact could not be installed",
    ExitCode.WORKER_DIED: "a detached worker died without finishing",
    ExitCode.BAD_INPUT: "bad input",
    ExitCode.INTERNAL: "internal error",
    ExitCode.STILL_RUNNING: "still running",
    ExitCode.INTERRUPTED: "interrupted",
}


class EnsureError(Exception):
    """A failure with an exit code, the stage it happened in, why, and what to do next."""

    def __init__(
        self,
        code: ExitCode,
        reason: str,
        *,
        stage: str = "",
        hint: str = "",
        detail: str = "",
    ) -> None:
        super().__init__(reason)
        self.code = ExitCode(code)
        self.reason = reason
        self.stage = stage
        self.hint = hint
        # Multi-line output (a command's indented output, a traceback tail) shown under the reason.
        self.detail = detail
        # Set by the run that failed, for the result object: its id, how long it ran, and what the root's
        # env file still holds (the previous install, which a failure before the build leaves answering).
        self.run_id: Optional[str] = None
        self.elapsed_s: Optional[float] = None
        self.installed: Optional[Dict[str, object]] = None

    def __str__(self) -> str:
        return self.reason


class BadInput(EnsureError):
    """A setting with a value the tool refuses, detected before anything is touched."""

    def __init__(self, setting: str, value: object, allowed: str) -> None:
        shown = repr(value) if isinstance(value, str) else str(value)
        super().__init__(
            ExitCode.BAD_INPUT,
            f"{setting}={shown} is not allowed: {allowed}",
            stage="settings",
        )
        self.setting = setting


class AlreadyImported(EnsureError):
    """``activate()`` in a process that already imported the tree's packages from elsewhere: the old modules
    stay in ``sys.modules``, so activating would mix two trees (exit code 6, as a probe failure)."""

    def __init__(self, module: str, imported: str, tree_file: str) -> None:
        super().__init__(
            ExitCode.PROBE,
            f"{module} is already imported from {imported}; the tree is {tree_file}; "
            f"activate before importing {module}, or in a fresh process",
            stage="activate",
            hint=f"call ensure_flydsl.activate() before the first import of {module}, or use a fresh process",
        )
        self.module = module
        self.imported = imported
        self.tree_file = tree_file


class Interrupted(BaseException):
    """Raised from the SIGTERM and SIGHUP handlers so that the run unwinds like Ctrl-C (exit 130)."""

    def __init__(self, signame: str = "SIGINT") -> None:
        super().__init__(signame)
        self.signame = signame

    @property
    def description(self) -> str:
        return interrupted_by(self.signame)


_SIGNAL_CAUSES = {"SIGHUP": " (the terminal closed)"}


def interrupted_by(signame: str) -> str:
    """What a failure marker and the last line say about a run stopped by ``signame``."""
    return f"interrupted by {signame}{_SIGNAL_CAUSES.get(signame, '')}"


def exit_code_of(exc: Optional[BaseException]) -> ExitCode:
    if exc is None:
        return ExitCode.OK
    if isinstance(exc, EnsureError):
        return exc.code
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return ExitCode.INTERRUPTED
    return ExitCode.INTERNAL
