"""The commit a GEAK folder is made from: the tool's own checkout when it runs from one (an editable install,
``src/``), else the folder pip installed it from (``direct_url.json``) when that checkout still holds exactly
the installed code, else said to be unknown.  A commit is never claimed for code it does not hold."""

from __future__ import annotations

import os
import pathlib
from importlib import metadata
from typing import Any, Iterator, Optional, Tuple
from urllib.parse import unquote

from ensure_flydsl.errors import EnsureError
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.support.fields import json_object
from ensure_flydsl.support.processes import CommandFailed

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ensure_flydsl package


def _git(folder: str, *args: str) -> Optional[str]:
    try:
        return Checkout(folder, folder, ()).git(*args).strip()
    except (EnsureError, CommandFailed):
        return None


def _checkout_commit(folder: str, package_dir: str) -> Optional[str]:
    """HEAD of the checkout holding ``folder`` (marked if the package differs), None if it is untracked."""
    head = _git(folder, "rev-parse", "--verify", "HEAD")
    if not head or not _git(folder, "ls-files", "--", package_dir):
        return None
    changes = _git(folder, "status", "--porcelain", "--", package_dir)
    return head if changes == "" else f"{head} with local changes"


def package_files(folder: Any, prefix: str = "") -> Iterator[Tuple[str, bytes]]:
    """A copy of the package (a folder, or the one running from a zipapp): each file but bytecode and types."""
    for entry in folder.iterdir():
        if entry.is_dir():
            if entry.name != "__pycache__":
                yield from package_files(entry, f"{prefix}{entry.name}/")
        elif not entry.name.endswith((".pyc", ".pyo", ".pyi", "py.typed")):
            yield prefix + entry.name, entry.read_bytes()


def _installed_from() -> Tuple[Optional[str], Optional[str]]:
    """The folder, or else the VCS commit, pip installed this copy from (PEP 610), as far as it says."""
    try:
        data = json_object((metadata.distribution("ensure-flydsl").read_text("direct_url.json") or "").encode())
    except (metadata.PackageNotFoundError, ValueError):  # no record, or not a JSON object
        return None, None
    vcs, url = data.get("vcs_info"), data.get("url")
    if isinstance(vcs, dict) and isinstance(vcs.get("commit_id"), str):
        return None, str(vcs["commit_id"])
    if isinstance(url, str) and url.startswith("file://"):
        return unquote(url[len("file://"):]), None  # a URL: `a%20b` is the folder `a b`
    return None, None


def tool_source() -> str:
    """The repository this copy of the tool comes from: its checkout's ``origin``, as far as it can be named."""
    for folder in (PACKAGE_DIR, _installed_from()[0]):
        if folder and os.path.isdir(folder):
            url = _git(folder, "config", "--get", "remote.origin.url")
            if url:
                return url
    return "unknown (a checkout with no remote named origin, or no checkout)"


def tool_commit() -> str:
    """The commit, or a sentence saying why none can be named."""
    here = _checkout_commit(PACKAGE_DIR, PACKAGE_DIR)
    if here:
        return here
    source, commit = _installed_from()
    if commit is not None:
        return commit
    if source is None:
        return "unknown (installed without a record of its source)"
    checkout_package = os.path.join(source, "src", "ensure_flydsl")
    head = _checkout_commit(source, checkout_package) if os.path.isdir(checkout_package) else None
    if head is None:
        return f"unknown (installed from {source}, which is not a git checkout of the tool now)"
    if dict(package_files(pathlib.Path(checkout_package))) != dict(package_files(pathlib.Path(PACKAGE_DIR))):
        return f"unknown (installed from {source}, whose code has changed since)"
    return head
