"""The host's git objects, shared between roots: a bare repository (objects only) under the store, named in each
root's ``.git/objects/info/alternates``, so a second root's fetch of a pin the host already has transfers
nothing (git finds the objects through the alternate and only updates its refs).  After a root's fetch, the
objects it got are fetched into the shared repository from the root (a local fetch), under the shared
repository's flock.  The shared repository keeps everything it was given: its automatic gc is off and nothing
is ever pruned there, since a root may rely on any object in it (`store prune` leaves it alone)."""

from __future__ import annotations

import fcntl
import os
from typing import Dict, Mapping

from ensure_flydsl import layout
from ensure_flydsl.support.processes import CommandFailed, cmd_output

# Refs of the shared repository, one namespace per root (what keeps its objects reachable).
ROOT_REFS = "refs/roots"


def _env(environ: Mapping[str, str]) -> Dict[str, str]:
    env = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


def shared_repository(store: str, environ: Mapping[str, str]) -> str:
    """The shared bare repository's folder, made if missing (OSError or CommandFailed when it cannot be)."""
    folder = layout.store_git_dir(store)
    if not os.path.isfile(os.path.join(folder, "HEAD")):
        cmd_output(["git", "init", "-q", "--bare", folder], env=_env(environ))
        for key, value in (("gc.auto", "0"), ("gc.pruneExpire", "never"), ("core.logAllRefUpdates", "false")):
            cmd_output(["git", "--git-dir", folder, "config", key, value], env=_env(environ))
    return folder


def borrow(root_git: str, shared: str) -> bool:
    """Name the shared objects in the root's alternates (once); whether they were added now."""
    objects = os.path.join(shared, "objects")
    info = os.path.join(root_git, "objects", "info")
    alternates = os.path.join(info, "alternates")
    try:
        with open(alternates) as handle:
            if objects in (line.strip() for line in handle):
                return False
    except FileNotFoundError:
        pass
    os.makedirs(info, exist_ok=True)
    with open(alternates, "a") as handle:
        handle.write(objects + "\n")
    return True


def give(root_git: str, shared: str, name: str, commit: str, environ: Mapping[str, str]) -> None:
    """The root's refs and ``commit`` (a pin fetched by its hash has no ref) with the objects they reach, fetched
    into the shared repository under ``refs/roots/NAME`` (a local fetch, under the shared repository's flock)."""
    lock = os.path.join(shared, "ensure-flydsl.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cmd_output(["git", "-c", "uploadpack.allowAnySHA1InWant=true", "--git-dir", shared, "fetch", "-q",
                    "--no-tags", "--no-write-fetch-head", root_git, f"+{commit}:{ROOT_REFS}/{name}/pin",
                    f"+refs/tags/*:{ROOT_REFS}/{name}/tags/*",
                    f"+refs/remotes/origin/*:{ROOT_REFS}/{name}/remotes/*"], env=_env(environ), timeout=600)
    finally:
        os.close(fd)


__all__ = ["CommandFailed", "borrow", "give", "shared_repository"]
