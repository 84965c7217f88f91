"""The one line for a path this user may not read or write (another user's root, a read-only mount).

The system's refusal becomes exit 64 naming the folder that blocks, its owner and what the command needs."""

from __future__ import annotations

import errno
import os
import stat
from typing import Optional, Tuple

from ensure_flydsl.errors import EnsureError, ExitCode, Stage

_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)


def access_error(exc: OSError, command: str) -> Optional[EnsureError]:
    """The EnsureError for ``exc`` when it is the system refusing access; None for any other OSError."""
    if exc.errno not in _REFUSED:
        return None
    doing = f"`ensure-flydsl {command}`"
    path = exc.filename if isinstance(exc.filename, str) else None
    if path is None:
        return EnsureError(ExitCode.BAD_INPUT, f"{doing} was refused by the system ({exc.strerror}); run it as the "
                           "user who owns FLYDSL_ROOT and the folder it is in", stage=Stage.ACCESS)
    if exc.errno == errno.EROFS:
        return EnsureError(ExitCode.BAD_INPUT, f"{path} is on a read-only file system, and {doing} needs to write "
                           "there: remount it read-write, or use a FLYDSL_ROOT on a writable file system",
                           stage=Stage.ACCESS)
    blocking, info = _blocking(path)
    me = _user(os.geteuid())
    if info is None:
        return EnsureError(ExitCode.BAD_INPUT, f"{path} cannot be reached by {me}, and {doing} needs it: run it as "
                           "the user who owns FLYDSL_ROOT, or use a FLYDSL_ROOT of your own", stage=Stage.ACCESS)
    is_dir = stat.S_ISDIR(info.st_mode)
    readable = os.access(blocking, os.R_OK | (os.X_OK if is_dir else 0))
    need = "write" if readable else "read"
    owner = _user(info.st_uid)
    what = "folder" if is_dir else "file"
    return EnsureError(
        ExitCode.BAD_INPUT,
        f"the {what} {blocking} cannot be {'written' if readable else 'read'} by {me}: it belongs to {owner}, mode "
        f"{stat.S_IMODE(info.st_mode):04o}; {doing} needs {need} access to it: run it as {owner}, or use a "
        "FLYDSL_ROOT of your own",
        stage=Stage.ACCESS,
    )


def _blocking(path: str) -> Tuple[str, Optional[os.stat_result]]:
    """The deepest of ``path`` and its parents this user can stat, with its stat (None: not even ``/``)."""
    current = os.path.abspath(path)
    while True:
        try:
            return current, os.stat(current)
        except OSError:
            parent = os.path.dirname(current)
            if parent == current:
                return path, None
            current = parent


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
