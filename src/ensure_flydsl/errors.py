"""Exit codes, the stages of a run, and the one user-facing error type.  An :class:`EnsureError` carries the
contract's exit code, the :class:`Stage` it happened in, a one-line reason and what to do next."""

from __future__ import annotations

import enum
import errno
import os
import pathlib
import pwd
import stat
from typing import Dict, FrozenSet, Optional, Tuple

from ensure_flydsl.support import space
from ensure_flydsl.support.launcher import command


class ExitCode(enum.IntEnum):
    meaning: str

    def __new__(cls, code: int, meaning: str = "") -> "ExitCode":  # ExitCode(code) looks a member up
        member = int.__new__(cls, code)
        member._value_, member.meaning = code, meaning
        return member

    OK = (0, "usable and env file written")
    FETCH = (2, "clone/fetch failed")
    CHECKOUT = (3, "checkout of the pin failed")
    LLVM_BUILD = (4, "LLVM/MLIR build failed")
    FLYDSL_BUILD = (5, "FlyDSL build failed")
    PROBE = (6, "built but the import probe still fails, or the interpreter lacks a module the pin imports")
    LOCK = (7, "lock not acquired")
    ARTIFACT = (8, "release or cache artifact could not be installed")
    WORKER_DIED = (9, "a detached worker died without finishing")
    BAD_INPUT = (64, "bad input")
    INTERNAL = (70, "internal error")
    STILL_RUNNING = (75, "still running")
    INTERRUPTED = (130, "interrupted")


# The exit codes a failed run records: all but 0 and 75 (still running: a README-following agent would go
# back to `wait` for ever).  Readers refuse the others (runs/markers.py: Failure.from_json).
FAILURE_CODES: FrozenSet[int] = frozenset(int(code) for code in ExitCode
                                          if code not in (ExitCode.OK, ExitCode.STILL_RUNNING))


class Plan(enum.Enum):
    """How a run provisions: each goes through its own stages."""

    SOURCE = "source"
    RELEASE = "release"
    CACHE = "cache"

    @property
    def stages(self) -> Tuple["Stage", ...]:
        return tuple(stage for stage in Stage if self in stage.plans)


_ALL = frozenset(Plan)
_NONE: FrozenSet[Plan] = frozenset()


class StrEnum(str, enum.Enum):
    """Python 3.11's enum.StrEnum: a member's text is its value (messages show ``auto``, not ``Strategy.AUTO``)."""

    def __str__(self) -> str:
        return str(self.value)


class Stage(StrEnum):
    """One stage; the members are in the order a run goes through them (the plans follow it)."""

    exit_code: Optional[ExitCode]  # a failure in it exits with this (None: its failures have several codes)
    order: Optional[int]  # the doctor's: a run stops at the blocking check of the earliest stage
    work: bool  # its time counts for ETAs only when it had something to do (not a no-op)
    plans: FrozenSet[Plan]

    def __new__(cls, name: str, exit_code: Optional[ExitCode], order: Optional[int], work: bool,
                plans: FrozenSet[Plan]) -> "Stage":
        stage = str.__new__(cls, name)
        stage._value_ = name
        stage.exit_code, stage.order, stage.work, stage.plans = exit_code, order, work, plans
        return stage

    @classmethod
    def parse(cls, name: object) -> Optional["Stage"]:
        """The stage a file names, or None for a name this version does not know (or no name at all)."""
        return cls._value2member_map_.get(name) if isinstance(name, str) else None  # type: ignore[return-value]

    STARTING = ("starting", None, None, False, _NONE)  # announced by `start`, before its worker runs
    SETTINGS = ("settings", ExitCode.BAD_INPUT, 0, False, _NONE)
    PROBE = ("probe", ExitCode.PROBE, 8, False, _ALL)
    LOCK = ("lock", ExitCode.LOCK, None, False, _ALL)
    FETCH = ("fetch", ExitCode.FETCH, 1, True, _ALL)
    # The doctor orders submodules after the requirements: a source build fetches them after the checkout.
    SUBMODULES = ("submodules", ExitCode.FETCH, 4, False, _NONE)
    CHECKOUT = ("checkout", ExitCode.CHECKOUT, 2, False, _NONE)
    REQUIREMENTS = ("requirements", ExitCode.PROBE, 3, False, _ALL)
    FIXES = ("fixes", None, None, False, frozenset({Plan.SOURCE}))
    LLVM = ("llvm", ExitCode.LLVM_BUILD, 5, True, frozenset({Plan.SOURCE}))
    BUILD = ("build", ExitCode.FLYDSL_BUILD, 6, True, frozenset({Plan.SOURCE}))
    RELEASE = ("release", ExitCode.ARTIFACT, 7, True, frozenset({Plan.RELEASE}))
    CACHE = ("cache", ExitCode.ARTIFACT, None, True, frozenset({Plan.CACHE}))
    VERIFY = ("verify", ExitCode.PROBE, None, False, _ALL)
    PUBLISH = ("publish", None, None, False, _ALL)
    # Not steps of a run's plan: where else a failure can come from.
    PROVISION = ("provision", ExitCode.INTERNAL, None, False, _NONE)  # no provider gave a tree (a bug)
    LEASE = ("lease", None, None, False, _NONE)  # waiting for another host's build
    DOCTOR = ("doctor", None, None, False, _NONE)  # checked before building: the failing check's stage's code
    ACTIVATE = ("activate", ExitCode.PROBE, None, False, _NONE)  # the API's activate()
    ACCESS = ("access", ExitCode.BAD_INPUT, None, False, _NONE)  # the system refused a folder
    CLEAN = ("clean", ExitCode.LOCK, None, False, _NONE)  # clean while a run is going
    SKILL = ("skill", ExitCode.ARTIFACT, None, False, _NONE)  # `skill DIR`: the vendored wheels not obtained


# A full file system is never a bug.  It stops a stage that fetches, builds or installs with that stage's code.
# Anywhere else (the tool's own files) it exits 5, the doctor's code for a disk without room to build.
_STAGES_THAT_FILL = frozenset({Stage.FETCH, Stage.SUBMODULES, Stage.CHECKOUT, Stage.LLVM, Stage.BUILD, Stage.RELEASE,
                               Stage.CACHE})


class EnsureError(Exception):
    def __init__(self, code: ExitCode, reason: str, *, stage: Optional[Stage] = None, hint: str = "", detail: str = "",
                 meaning: Optional[str] = None) -> None:
        super().__init__(reason)
        self.code, self.reason, self.stage, self.hint = ExitCode(code), reason, stage, hint
        self.detail = detail  # multi-line output (a command's, a traceback's tail) shown under the reason
        # What the exit code means, when not the table's (a full file system's exit 5 is no failed build).
        self.meaning = self.code.meaning if meaning is None else meaning
        # Given by the run that failed (``of_run``): its id, how long it ran, what the env file still holds.
        self.run_id: Optional[str] = None
        self.elapsed_s: Optional[float] = None
        self.installed: Optional[Dict[str, object]] = None

    def __str__(self) -> str:
        return self.reason

    def amended(self, *, reason: Optional[str] = None, hint: Optional[str] = None) -> "EnsureError":
        """A copy with a new reason or hint, to raise in its place: an error is never changed once raised."""
        return self._copy(reason=self.reason if reason is None else reason, hint=self.hint if hint is None else hint)

    def of_run(self, run_id: str, elapsed_s: float, installed: Optional[Dict[str, object]]) -> "EnsureError":
        """A copy that names the run that failed, how long it ran and what the env file still holds."""
        return self._copy(run_id=run_id, elapsed_s=elapsed_s, installed=installed)

    def _copy(self, **changes: object) -> "EnsureError":
        new = type(self).__new__(type(self), *self.args)
        new.__dict__.update(vars(self), **changes)
        new.args = (new.reason,)
        return new


def disk_full_error(exc: OSError, stage: Optional[Stage]) -> Optional["EnsureError"]:
    """The one-line EnsureError for ``exc`` when it is a full file system (or quota), met in ``stage``."""
    if not space.is_full(exc):
        return None
    path = exc.filename if isinstance(exc.filename, str) else None
    where = space.no_space(path, exc.errno) if path else "no space left on a file system this command writes to"
    advice = f"free space there (`{command('clean')}` removes what this tool made for the root) and run it again"
    code = (stage.exit_code if stage is not None and stage in _STAGES_THAT_FILL else None) or ExitCode.FLYDSL_BUILD
    return EnsureError(code, f"{where}; {advice}", stage=stage, meaning="a full file system")


def access_error(exc: OSError, name: str) -> Optional[EnsureError]:
    """The line for a path this user may not read or write (another user's root, a read-only mount): exit 64
    naming the folder that blocks, its owner and what the command ``name`` needs; None for any other OSError."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    doing, me = f"`{command(name)}`", _user(os.geteuid())
    path = exc.filename if isinstance(exc.filename, str) else None
    if path is None:
        reason = (f"{doing} was refused by the system ({exc.strerror}); run it as the user who owns FLYDSL_ROOT and "
                  "the folder it is in")
    elif exc.errno == errno.EROFS:
        reason = (f"{path} is on a read-only file system, and {doing} needs to write there: remount it read-write, "
                  "or use a FLYDSL_ROOT on a writable file system")
    else:
        blocking, info = _blocking(path)
        if info is None:
            reason = (f"{path} cannot be reached by {me}, and {doing} needs it: run it as the user who owns "
                      "FLYDSL_ROOT, or use a FLYDSL_ROOT of your own")
        else:
            is_dir, owner = stat.S_ISDIR(info.st_mode), _user(info.st_uid)
            readable = os.access(blocking, os.R_OK | (os.X_OK if is_dir else 0))
            reason = (f"the {'folder' if is_dir else 'file'} {blocking} cannot be {'written' if readable else 'read'} "
                      f"by {me}: it belongs to {owner}, mode {stat.S_IMODE(info.st_mode):04o}; {doing} needs "
                      f"{'write' if readable else 'read'} access to it: run it as {owner}, or use a FLYDSL_ROOT of "
                      "your own")
    return EnsureError(ExitCode.BAD_INPUT, reason, stage=Stage.ACCESS)


def _blocking(path: str) -> Tuple[str, Optional[os.stat_result]]:
    """The deepest of ``path`` and its parents this user can stat, with its stat (None: not even ``/``)."""
    full = os.path.abspath(path)
    for folder in (full, *map(str, pathlib.PurePath(full).parents)):
        try:
            return folder, os.stat(folder)
        except OSError:
            pass
    return path, None


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:  # no passwd entry (a container's arbitrary uid)
        return f"uid {uid}"


class Refused(EnsureError):
    """Bad input on the command line: exit 64 and one line naming the command (``prog``), as argparse's errors do."""

    def __init__(self, reason: str, prog: str = "ensure-flydsl") -> None:
        super().__init__(ExitCode.BAD_INPUT, f"{prog}: {reason}", stage=Stage.SETTINGS)


class BadInput(EnsureError):
    """A setting with a value the tool refuses, detected before anything is touched."""

    def __init__(self, setting: str, value: object, allowed: str) -> None:
        shown = repr(value) if isinstance(value, str) else str(value)
        super().__init__(ExitCode.BAD_INPUT, f"{setting}={shown} is not allowed: {allowed}", stage=Stage.SETTINGS)
        self.setting = setting


class AlreadyImported(EnsureError):
    """``activate()`` after the tree's packages were imported from elsewhere: activating would mix two trees."""

    def __init__(self, module: str, imported: str, tree_file: str) -> None:
        super().__init__(ExitCode.PROBE, f"{module} is already imported from {imported}; the tree is {tree_file}; "
                         f"activate before importing {module}, or in a fresh process", stage=Stage.ACTIVATE,
                         hint=f"call ensure_flydsl.activate() before the first import of {module}, or use a fresh "
                         "process")
        self.module, self.imported, self.tree_file = module, imported, tree_file


class Interrupted(BaseException):
    """Raised from the SIGTERM and SIGHUP handlers so that the run unwinds like Ctrl-C (exit 130)."""

    def __init__(self, signame: str = "SIGINT") -> None:
        super().__init__(signame)
        self.signame = signame


def interrupted_by(exc: BaseException) -> str:
    """What a failure marker and the last line say about a run a signal stopped (Ctrl-C: SIGINT)."""
    signame = exc.signame if isinstance(exc, Interrupted) else "SIGINT"
    return f"interrupted by {signame}" + (" (the terminal closed)" if signame == "SIGHUP" else "")


def exit_code_of(exc: Optional[BaseException]) -> ExitCode:
    if exc is None:
        return ExitCode.OK
    if isinstance(exc, EnsureError):
        return exc.code
    if isinstance(exc, (KeyboardInterrupt, Interrupted)):
        return ExitCode.INTERRUPTED
    return ExitCode.INTERNAL
