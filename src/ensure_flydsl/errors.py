"""Exit codes, the stages of a run, and the one user-facing error type.

Every failure the tool reports is an :class:`EnsureError` carrying the exit code of the contract
(the README's exit-code table), the stage it happened in, a one-line reason and what to do next.  The CLI's
top-level handler maps it, Ctrl-C and bugs to distinct exit codes.

The stages are in one place (:class:`Stage`): each one's name (the string the failure marker, the run
records, the JSON objects and the README write), the exit code a failure in it has, its place in the
doctor's order, whether its time counts for ETAs only when it did real work, and the plans (how a run
provisions) that go through it.  A stage is a :class:`Stage`, never a bare string: a misspelt one is a type
error.  It is a ``str`` (its name), so a record or a message writes it as before; a reader of a file parses
the name back with :meth:`Stage.parse`, which gives None for a name it does not know (a file from another
version, or not the tool's).

The exit codes, plans and stages are built in stages.py, at the first use of one (``from ensure_flydsl.errors
import Stage`` imports it): the warm call raises no error, and building them was most of this module's import.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is for the type checker only: not imported on the warm call's path
if TYPE_CHECKING:
    from typing import Dict, Optional

    from ensure_flydsl.stages import EXIT_MEANINGS as EXIT_MEANINGS
    from ensure_flydsl.stages import FAILURE_CODES as FAILURE_CODES
    from ensure_flydsl.stages import ExitCode as ExitCode
    from ensure_flydsl.stages import Plan as Plan
    from ensure_flydsl.stages import Stage as Stage
    from ensure_flydsl.stages import disk_full_code as disk_full_code

# The names stages.py gives, as they were given from here.
_FROM_STAGES = frozenset({"EXIT_MEANINGS", "FAILURE_CODES", "ExitCode", "Plan", "Stage", "disk_full_code"})


def __getattr__(name: str) -> object:
    """``errors.Stage`` and the other names of stages.py, built at the first use of one (PEP 562)."""
    if name in _FROM_STAGES:
        from ensure_flydsl import stages

        return getattr(stages, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


NO_SPACE_ADVICE = "free space there (`ensure-flydsl clean` removes what this tool made for the root) and run it again"


class EnsureError(Exception):
    """A failure with an exit code, the stage it happened in, why, and what to do next."""

    def __init__(
        self,
        code: ExitCode,
        reason: str,
        *,
        stage: Optional[Stage] = None,
        hint: str = "",
        detail: str = "",
        meaning: Optional[str] = None,
    ) -> None:
        from ensure_flydsl.stages import EXIT_MEANINGS, ExitCode

        super().__init__(reason)
        self.code = ExitCode(code)
        self.reason = reason
        self.stage = stage
        self.hint = hint
        # Multi-line output (a command's indented output, a traceback tail) shown under the reason.
        self.detail = detail
        # What the one line says the exit code means, when not the table's (a full file system's exit 5 is
        # no failed build).
        self.meaning = EXIT_MEANINGS[self.code] if meaning is None else meaning
        # Given by the run that failed (``of_run``), for the result object: its id, how long it ran, and what
        # the root's env file still holds (the previous install, which a failure before the build leaves
        # answering).
        self.run_id: Optional[str] = None
        self.elapsed_s: Optional[float] = None
        self.installed: Optional[Dict[str, object]] = None

    def __str__(self) -> str:
        return self.reason

    def amended(self, *, reason: Optional[str] = None, hint: Optional[str] = None) -> "EnsureError":
        """A copy (of the same class, every attribute kept) with a new reason or hint, to raise in this one's
        place: an error is never changed once raised, so whoever caught it before (a provider giving up its
        lease, the failure marker's writer) saw the same error that goes on."""
        new = self._copy()
        if reason is not None:
            new.reason = reason
            new.args = (reason,)
        if hint is not None:
            new.hint = hint
        return new

    def of_run(self, run_id: str, elapsed_s: float, installed: Optional[Dict[str, object]]) -> "EnsureError":
        """A copy that names the run that failed, how long it ran and what the env file still holds."""
        new = self._copy()
        new.run_id, new.elapsed_s, new.installed = run_id, elapsed_s, installed
        return new

    def _copy(self) -> "EnsureError":
        new = type(self).__new__(type(self), *self.args)
        new.__dict__.update(vars(self))
        new.args = self.args
        return new


def disk_full_error(exc: OSError, stage: Optional[Stage]) -> Optional["EnsureError"]:
    """The one-line EnsureError for ``exc`` when it is a full file system (or quota), met in ``stage``: it
    names the file system, its free space and what to do; None for any other error."""
    from ensure_flydsl.stages import disk_full_code
    from ensure_flydsl.support import space

    if not space.is_full(exc):
        return None
    path = exc.filename if isinstance(exc.filename, str) else None
    where = space.no_space(path, exc.errno) if path else "no space left on a file system this command writes to"
    return EnsureError(disk_full_code(stage), f"{where}; {NO_SPACE_ADVICE}", stage=stage,
                       meaning="a full file system")


class BadInput(EnsureError):
    """A setting with a value the tool refuses, detected before anything is touched."""

    def __init__(self, setting: str, value: object, allowed: str) -> None:
        from ensure_flydsl.stages import ExitCode, Stage

        shown = repr(value) if isinstance(value, str) else str(value)
        super().__init__(
            ExitCode.BAD_INPUT,
            f"{setting}={shown} is not allowed: {allowed}",
            stage=Stage.SETTINGS,
        )
        self.setting = setting


class AlreadyImported(EnsureError):
    """``activate()`` in a process that already imported the tree's packages from elsewhere: the old modules
    stay in ``sys.modules``, so activating would mix two trees (exit code 6, as a probe failure)."""

    def __init__(self, module: str, imported: str, tree_file: str) -> None:
        from ensure_flydsl.stages import ExitCode, Stage

        super().__init__(
            ExitCode.PROBE,
            f"{module} is already imported from {imported}; the tree is {tree_file}; "
            f"activate before importing {module}, or in a fresh process",
            stage=Stage.ACTIVATE,
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
    from ensure_flydsl.stages import ExitCode

    if exc is None:
        return ExitCode.OK
    if isinstance(exc, EnsureError):
        return exc.code
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return ExitCode.INTERRUPTED
    return ExitCode.INTERNAL
