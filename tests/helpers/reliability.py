"""Shared by the reliability suites (test_concurrency, test_kill_stages, test_disk, test_bad_input,
test_security) and by docs/reliability_figures.py, which turns what they record into docs/RELIABILITY.md.

``record()`` appends one JSON object per event to the file named by RELIABILITY_FIGURES (set by the
figures script); unset, it does nothing, and the suites are plain tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import time
from typing import Dict, Iterator, List, Optional

FIGURES_ENV = "RELIABILITY_FIGURES"


def record(event: str, **fields: object) -> None:
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(dict(fields, event=event), sort_keys=True) + "\n")


def listing(top: str, skip: Optional[List[str]] = None) -> Dict[str, str]:
    """Every path under ``top`` (relative), with its type and, for files, size: what "nothing was created
    or changed" is checked against.  ``skip`` names relative paths to leave out, with all they hold."""
    found: Dict[str, str] = {}
    skip = skip or []
    for folder, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, top)
            if any(rel == s or rel.startswith(s + os.sep) for s in skip):
                continue
            st = os.lstat(full)
            if os.path.islink(full):
                found[rel] = "link -> " + os.readlink(full)
            elif os.path.isdir(full):
                found[rel] = "dir %o" % (st.st_mode & 0o7777)
            else:
                found[rel] = "file %o %d" % (st.st_mode & 0o7777, st.st_size)
    return found


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def wait_for_file(path: str, timeout: float = 60.0, proc: Optional["subprocess.Popen[str]"] = None) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"the run ended ({proc.returncode}) before {path} appeared:\n{out}\n{err}")
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.005)


@contextlib.contextmanager
def tmpfs(path: str, size: str, *, read_only: bool = False) -> Iterator[str]:
    """A tmpfs of ``size`` mounted at ``path``.  Only root can mount: elsewhere, or where even root may not
    (a container without CAP_SYS_ADMIN), the test is skipped, saying why (and the figures script never counts
    a skip as a pass); any other mount that fails fails the test."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip(f"mounting a tmpfs needs root (CI runs the suite as root); this runs as uid {os.geteuid()}")
    os.makedirs(path, exist_ok=True)
    options = f"size={size}" + (",ro" if read_only else "")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0 and any(word in done.stdout.lower() for word in ("permission denied", "not permitted")):
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stdout.strip()}")
    assert done.returncode == 0, f"cannot mount a tmpfs at {path} (the disk tests need root): {done.stdout}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False)


GIT_WRAPPER = r"""#!/bin/bash
# Stands in for git (first on PATH): runs the real one; for the subcommand GIT_SLOW_SUB it announces the
# call (GIT_SLOW_DIR/<sub>.entered, holding the real git's pid) and, once git is done, <sub>.done.
sub=""
skip=0
for a in "$@"; do
  if [ "$skip" = 1 ]; then skip=0; continue; fi
  case "$a" in
    -c|-C) skip=1 ;;
    -*) ;;
    *) sub="$a"; break ;;
  esac
done
if [ -n "${GIT_SLOW_DIR:-}" ] && [ "$sub" = "${GIT_SLOW_SUB:-}" ]; then
  "@REAL@" "$@" &
  child=$!
  echo "$child" > "$GIT_SLOW_DIR/$sub.entered.tmp"
  mv "$GIT_SLOW_DIR/$sub.entered.tmp" "$GIT_SLOW_DIR/$sub.entered"
  wait "$child"
  status=$?
  touch "$GIT_SLOW_DIR/$sub.done"
  exit "$status"
fi
exec "@REAL@" "$@"
"""


def device(path: str) -> str:
    """A character device like /dev/null at ``path`` (root), else /dev/null itself: a user cannot replace
    that one, so a tool that tried would fail rather than destroy it."""
    if os.geteuid() != 0:
        return "/dev/null"
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


def git_wrapper(folder: str, real_git: str) -> str:
    """Write the wrapper as ``folder/git``; returns ``folder`` (to put first on PATH)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "git")
    with open(path, "w") as handle:
        handle.write(GIT_WRAPPER.replace("@REAL@", real_git))
    os.chmod(path, 0o755)
    return folder
