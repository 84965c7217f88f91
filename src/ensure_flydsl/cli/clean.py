"""``ensure-flydsl clean``: remove what this tool created for the root, under the build lock, and nothing else;
the root goes whole only when the tool made it and it holds nothing else; the lock file always stays."""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from typing import List

from ensure_flydsl import layout
from ensure_flydsl.cli import Call
from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.pipeline.lock import build_lock
from ensure_flydsl.result import result_json, result_object
from ensure_flydsl.runs.markers import withdraw_env_file, withdraw_failure_marker
from ensure_flydsl.runs.records import RunStore, sibling_roots
from ensure_flydsl.settings import Settings
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.source.root import Stamps, foreign_files, is_ours, other_roots, owner, remove_made
from ensure_flydsl.support.files import remove_file, remove_tree, rename_into_place
from ensure_flydsl.support.launcher import command
from ensure_flydsl.ways.source.environment import LlvmRecord


def clean(call: Call, settings: Settings) -> int:
    """Say a line for each thing kept and each removed (under --json also one result object naming them); 0."""
    root = settings.root
    notes: List[str] = []
    _refuse_while_running(settings)
    with build_lock(settings.lock_file, timeout=0, run_id="clean-" + uuid.uuid4().hex[:8], say=call.reporter.say):
        _refuse_while_running(settings)  # a detached worker probes before it takes the lock
        removed = _clean_shared_files(settings, notes)
        if withdraw_env_file(settings.env_file, settings.env_json):
            removed.append(settings.env_file)
        record = LlvmRecord.read(settings.base_dir)
        llvm_folder = layout.llvm_dir(settings.base_dir)
        sharing = other_roots(settings.base_dir, settings.root)
        if record is not None and record.created and sharing:
            notes.append(f"kept {llvm_folder}: the other roots in {settings.base_dir} build with it too "
                         f"({', '.join(sharing[:3])})")
        elif record is not None and record.created:
            if not _remove_made(llvm_folder, layout.llvm_made_record(settings.base_dir), notes):
                if os.path.lexists(llvm_folder):
                    removed.append(llvm_folder)
                remove_file(layout.llvm_record(settings.base_dir))
            elif record.done is not None:
                LlvmRecord(created=True).write(settings.base_dir)  # its MLIR is gone; the folder is still ours
        if is_ours(root):
            removed.extend(_clean_root(root, settings, notes))
        elif os.path.isdir(root):
            notes.append(f"kept {root}: ensure-flydsl did not create it")
        removed.extend(_clean_runs(settings))  # after the root: a root being removed is moved aside into its folder
    lines = [*notes, *(f"removed {path}" for path in removed)] + ([] if removed else ["nothing to clean"])
    for line in lines:
        call.reporter.say(line)
    if call.as_json:
        print(result_json(result_object(ok=True, exit_code=0, reason="; ".join(lines), log=settings.log_file,
                                        root=settings.root, removed=removed, kept=notes)))
    return 0


def _refuse_while_running(settings: Settings) -> None:
    live = RunStore(settings.root).any_alive()
    if live:
        run = live[0]
        raise EnsureError(
            ExitCode.LOCK,
            f"a run for {settings.root} is going (run {run.run_id}, pid {run.pid}, step {run.step}): cleaning "
            "now would take its files from under it",
            stage=Stage.CLEAN, hint=f"wait for it to end (`{command('wait')}`), or stop it, then run clean again",
        )


def _clean_shared_files(settings: Settings, notes: List[str]) -> List[str]:
    """The marker if written for this root, and the log unless sibling roots write to it too."""
    removed: List[str] = []
    marker = settings.fail_marker
    if withdraw_failure_marker(marker, settings.root):
        removed.append(marker)
    elif os.path.lexists(marker):
        notes.append(f"kept {marker}: it was written for another root")
    sharing = sibling_roots(settings.root)
    for path in (settings.log_file, settings.log_file + ".1"):
        if sharing and os.path.lexists(path):
            notes.append(f"kept {path}: other roots log there too ({', '.join(sharing[:3])})")
        elif remove_file(path):
            removed.append(path)
    return removed


def _clean_runs(settings: Settings) -> List[str]:
    """The root's run records; the base's state folder (MLIR installs fetched from the cache) too once no other
    root of this base has records in it.  The host's ETA history is every root's: it stays."""
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


def _clean_root(root: str, settings: Settings, notes: List[str]) -> List[str]:
    info = owner(root)
    foreign = foreign_files(Checkout.of(settings, os.environ))  # the command line's own
    if (info is not None and info.created_root) and not foreign:
        _remove_root(root)
        return [root]
    removed: List[str] = []
    build_folder = layout.build_dir(root)
    if os.path.lexists(build_folder) and Stamps(root).started_key("build") is not None:
        if not _remove_made(build_folder, layout.build_made_record(root), notes):
            removed.append(build_folder)
    if foreign and (info is not None and info.created_root):
        # The checkout stays (it holds somebody's files), and so does the record that the tool made it:
        # without it the next run would take the root for somebody else's folder and refuse it.
        for entry in sorted(os.listdir(layout.state_dir(root))):
            path = os.path.join(layout.state_dir(root), entry)
            if path != layout.owner_file(root):
                (remove_tree if os.path.isdir(path) else remove_file)(path)  # a link: either unlinks it
                removed.append(path)
    else:
        remove_tree(layout.state_dir(root))
        removed.append(layout.state_dir(root))
    if foreign:
        notes.append(f"kept {root} itself (still ensure-flydsl's checkout) and the files in it that "
                     f"ensure-flydsl did not create: {_first_ten(foreign)}")
    else:
        notes.append(f"kept {root} itself: ensure-flydsl adopted it (another tool made the checkout)")
    return removed


def _remove_root(root: str) -> None:
    """Moved aside first: a clean stopped midway leaves no half root (nobody's once its owner record is gone)."""
    aside = os.path.join(RunStore(root).base, "removing")
    os.makedirs(aside, exist_ok=True)
    with contextlib.suppress(OSError):  # a mount point is removed where it is
        rename_into_place(root, os.path.join(aside, uuid.uuid4().hex))
    remove_tree(root)
    shutil.rmtree(aside, ignore_errors=True)  # with what a stopped clean left (a sibling root's may be going too)


def _remove_made(folder: str, record: str, notes: List[str]) -> List[str]:
    """Remove what the builds recorded making in ``folder``; return somebody else's files, which stay."""
    if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
        notes.append(f"kept {folder}: it is not the folder ensure-flydsl built in")
        return [folder]
    kept = remove_made(folder, record)
    if kept:
        notes.append(f"kept {len(kept)} files or folders in {folder} that ensure-flydsl did not create: "
                     f"{_first_ten(kept)}; removed what its builds made there")
    return kept


def _first_ten(paths: List[str]) -> str:
    return ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
