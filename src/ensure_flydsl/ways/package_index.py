"""Ask the package index what it has, through ``pip index versions`` so that pip's own configuration applies;
given the install's ``--python-version/--abi/--platform`` it lists only versions with a wheel for the target."""

from __future__ import annotations

import contextlib
import re
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

from ensure_flydsl.support.processes import run_captured

# pip's words for "the index could not be reached" (as opposed to "it answered: no such thing").
_UNREACHABLE = ("Could not fetch URL", "NewConnectionError", "Failed to establish a new connection",
                "Max retries exceeded", "ConnectTimeoutError", "ReadTimeoutError", "ProxyError", "SSLError",
                "Temporary failure in name resolution", "Name or service not known", "Network is unreachable",
                "Connection refused", "timed out")
_AVAILABLE = re.compile(r"^Available versions:\s*(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class IndexAnswer:
    package: str
    answered: bool  # pip reached the index (or the find-links) and got an answer
    versions: Tuple[str, ...]  # versions with a usable distribution, as pip lists them (newest first)
    detail: str  # the last lines of pip's output when something went wrong


# Settings of the caller's pip that cannot go with --target (pip would refuse, or install elsewhere).
CONFLICTING_PIP_ENV = ("PIP_TARGET", "PIP_PREFIX", "PIP_ROOT", "PIP_USER", "PIP_REQUIRE_VIRTUALENV")


def pip_env(environ: Mapping[str, str]) -> Dict[str, str]:
    """The caller's environment for pip: its own PIP_* settings kept, the tree's PYTHONPATH not handed on."""
    env = {k: v for k, v in environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", *CONFLICTING_PIP_ENV)}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def query_versions(python: str, package: str, environ: Mapping[str, str], *, timeout: float,
                   options: Sequence[str] = (), limit: Optional[float] = None) -> IndexAnswer:
    """``pip index versions package``, binary distributions only; ``options`` select another interpreter's
    wheels, ``limit`` bounds the whole command (by default generously: pip's start is slow on a loaded host)."""
    # -vv: with --retries 0 pip reports an index it could not reach only at debug level ("Could not fetch
    # URL ..."); without it, "cannot reach the index" looks like "the index has no such package".
    cmd = [python, "-m", "pip", "index", "versions", package, "--only-binary=:all:", "-vv",
           "--timeout", str(max(1, int(timeout))), "--retries", "0", *options]
    most = max(timeout * 2 + 10, 30.0) if limit is None else limit
    try:
        proc = run_captured(cmd, env=pip_env(environ), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=most)
    except subprocess.TimeoutExpired:
        return IndexAnswer(package, False, (), f"pip did not answer within {most:.0f} s")
    except OSError as exc:
        return IndexAnswer(package, False, (), f"cannot run {python}: {exc.strerror}")
    out = proc.stdout.decode(errors="replace")
    found = _AVAILABLE.search(out)
    if proc.returncode == 0 and found:
        versions = tuple(v.strip() for v in found.group(1).split(",") if v.strip())
        return IndexAnswer(package, True, versions, "")
    if "No module named pip" in out:
        return IndexAnswer(package, False, (), f"{python} has no pip")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    # "Could not fetch URL ...: 404 Client Error" is an answer (no such project there); anything else is not.
    unreachable = [line for line in lines if any(word in line for word in _UNREACHABLE)
                   and not re.search(r"\b4\d\d Client Error", line)]
    if "No matching distribution" in out and not unreachable:
        return IndexAnswer(package, True, (), f"no {package} distribution for this interpreter")
    why = (unreachable or [line for line in lines if line.startswith("ERROR")] or lines[-1:])
    detail = why[0][:300] if why else f"pip exited with {proc.returncode}"
    return IndexAnswer(package, False, (), detail)


def newest_first(versions: Sequence[str], minimum: Optional[str] = None) -> List[str]:
    """``versions`` that parse with a release segment >= ``minimum``, newest first."""
    floor = Version(minimum).release if minimum is not None else ()
    parsed = []
    for text in versions:
        with contextlib.suppress(InvalidVersion):
            parsed.append((Version(text), text))
    return [text for version, text in sorted(parsed, reverse=True) if version.release >= floor]
