"""``ensure-flydsl clean``: remove what this tool created for the root, and never anything else.

Under the build lock (a running build is never pulled from under itself).  The root goes entirely only
when the tool created it and it holds nothing the tool did not put there; otherwise only the tool's own
parts go (its state folder, its build folder, the markers) and the rest is listed as kept.  The lock file
itself is never deleted (see lock.py).
"""

from __future__ import annotations

import os
import uuid
from typing import List

from ..build import mlir_install_of
from ..gitsource import git
from ..lock import build_lock
from ..markers import withdraw_env_file
from ..provision import llvm_record_path
from ..report import Reporter
from ..runs import RunStore
from ..settings import Settings
from ..state import BUILD_OUTPUTS, Stamps, is_ours, owner, remove_tree, state_dir
from ..util import CommandFailed, read_json, remove_file


def clean(settings: Settings, reporter: Reporter) -> int:
    root = settings.root
    with build_lock(settings.lock_file, timeout=0, run_id="clean-" + uuid.uuid4().hex[:8], say=reporter.say):
        removed: List[str] = []
        for path in (settings.fail_marker, settings.log_file, settings.log_file + ".1"):
            if remove_file(path):
                removed.append(path)
        if withdraw_env_file(settings.env_file, settings.env_json):
            removed.append(settings.env_file)
        record_path = llvm_record_path(settings.base_dir)
        record = read_json(record_path)
        llvm_dir = os.path.dirname(mlir_install_of(settings.base_dir))
        sharing = _other_roots(settings)
        if record and record.get("created") and sharing:
            reporter.say(f"kept {llvm_dir}: the other roots in {settings.base_dir} build with it too "
                         f"({', '.join(sharing[:3])})")
        elif record and record.get("created"):
            if os.path.lexists(llvm_dir):
                remove_tree(llvm_dir)
                removed.append(llvm_dir)
            remove_file(record_path)
        removed.extend(_clean_runs(settings))
        if is_ours(root):
            removed.extend(_clean_root(root, settings, reporter))
        elif os.path.isdir(root):
            reporter.say(f"kept {root}: ensure-flydsl did not create it")
        for path in removed:
            reporter.say(f"removed {path}")
        if not removed:
            reporter.say("nothing to clean")
    return 0


def _other_roots(settings: Settings) -> List[str]:
    """The other roots of this tool in the same folder (they share its LLVM build)."""
    try:
        names = os.listdir(settings.base_dir)
    except OSError:
        return []
    return [os.path.join(settings.base_dir, n) for n in sorted(names)
            if os.path.join(settings.base_dir, n) != settings.root and is_ours(os.path.join(settings.base_dir, n))]


def _clean_runs(settings: Settings) -> List[str]:
    """The root's run records; the base's state folder (ETA history, MLIR installs fetched from the cache)
    too once no other root of this base has records in it."""
    store = RunStore(settings.root)
    removed: List[str] = []
    if os.path.isdir(store.folder):
        remove_tree(store.folder)
        removed.append(store.folder)
    runs = os.path.dirname(store.folder)
    others = os.listdir(runs) if os.path.isdir(runs) else []
    if not others and os.path.isdir(store.base):
        remove_tree(store.base)
        removed.append(store.base)
    return removed


def _clean_root(root: str, settings: Settings, reporter: Reporter) -> List[str]:
    info = owner(root) or {}
    foreign = _foreign_files(root, settings.repo)
    if info.get("created_root") and not foreign:
        remove_tree(root)
        return [root]
    removed: List[str] = []
    build_dir = os.path.join(root, "build-fly")
    if os.path.lexists(build_dir) and Stamps(root).started_key("build") is not None:
        remove_tree(build_dir)
        removed.append(build_dir)
    remove_tree(state_dir(root))
    removed.append(state_dir(root))
    why = f"it holds files ensure-flydsl did not create ({', '.join(foreign[:3])})" if foreign else \
        "ensure-flydsl adopted it (another tool made the checkout)"
    reporter.say(f"kept {root} itself: {why}")
    return removed


def _foreign_files(root: str, repo: str) -> List[str]:
    """Untracked files in the root that are not build outputs or the tool's: somebody else's work."""
    if not os.path.isdir(os.path.join(root, ".git")):
        return [e for e in os.listdir(root) if e not in (".ensure_flydsl", "flydsl_env.sh", "flydsl_env.json")]
    try:
        out = git(root, "status", "--porcelain=v1", "--untracked-files=normal", repo=repo)
    except CommandFailed:
        return ["(git status failed)"]
    paths = [line[3:] for line in out.splitlines() if line.strip()]
    return [p for p in paths if not any(p == o or p.startswith(o) for o in BUILD_OUTPUTS)]
