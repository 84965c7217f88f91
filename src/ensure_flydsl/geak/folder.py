"""``ensure-flydsl skill DIR``: the folder GEAK takes in place of its ``skills/ensure_flydsl/`` (skill.md, the
launcher, ``tool/``, VERSION), with a manifest of every file's sha256 so that ``--force`` replaces only a folder
this command made, unchanged; made beside DIR and renamed into place."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from typing import Callable, Dict, List, Optional

from ensure_flydsl.errors import BadInput, ExitCode
from ensure_flydsl.geak import vendor
from ensure_flydsl.geak.provenance import PACKAGE_DIR, tool_commit
from ensure_flydsl.settings import DEFAULT_MIN_VERSION, DEFAULT_PIN, SETTINGS
from ensure_flydsl.support.files import (
    atomic_write_json,
    file_sha256,
    move_aside,
    read_json,
    remove_tree,
    rename_into_place,
)
from ensure_flydsl.version import __version__
from ensure_flydsl.warm import DEFAULT_ROOT

MANIFEST = ".ensure-flydsl-skill.json"
MADE_BY = "ensure-flydsl skill"
TEMPLATES = os.path.join(PACKAGE_DIR, "geak", "templates")
# The overrides GEAK's skill has always offered (the bash script's own), listed first in skill.md.
FIRST_SETTINGS = ("FLYDSL_ROOT", "FLYDSL_MIN_VERSION", "FLYDSL_BUILD_LOCK")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class SkillFolder:
    path: str
    version: str
    commit: str
    vendored: List[str]
    replaced: bool


def _made_files(folder: str) -> Optional[Dict[str, str]]:
    """The files the manifest in ``folder`` says this command wrote (path: sha256), else None."""
    data = read_json(os.path.join(folder, MANIFEST))
    files = data.get("files") if data is not None and data.get("made_by") == MADE_BY else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and _HEX64.match(v)
                                              for k, v in files.items()):
        return None
    return {str(k): str(v) for k, v in files.items()}


def _python_bytecode(rel: str) -> bool:
    """What Python itself writes beside the vendored modules when the folder runs."""
    parts = rel.split(os.sep)
    return len(parts) > 1 and parts[-2] == "__pycache__" and rel.endswith(".pyc")


def _not_ours(folder: str, made: Dict[str, str]) -> List[str]:
    """Every entry of ``folder`` that is not a file this command wrote, as it wrote it."""
    foreign: List[str] = []
    for current, dirs, names in os.walk(folder):
        for name in dirs + names:
            path = os.path.join(current, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path) or (name in names and not os.path.isfile(path)):
                foreign.append(rel)
            elif name in names and rel != MANIFEST and not _python_bytecode(rel) and made.get(rel) != file_sha256(path):
                foreign.append(rel + (" (changed)" if rel in made else ""))
    return sorted(foreign)


def refusal(target: str, force: bool) -> Optional[str]:
    """Why the folder may not be written at ``target`` (None: it may); nothing is touched to find out."""
    if not os.path.lexists(target):
        return None
    if os.path.islink(target) or not os.path.isdir(target):
        return "it exists and is not a folder this command made; choose another path or move it away yourself"
    made = _made_files(target)
    if made is None:
        return (f"it exists and was not made by `ensure-flydsl skill` (no {MANIFEST} in it): nothing was changed; "
                "move it away yourself (GEAK's own folder: `git rm -r` it) or choose another path")
    if not force:
        return "it is a folder this command made: add --force to replace it"
    foreign = _not_ours(target, made)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"it holds files this command did not write ({shown}): nothing was changed; move them away first"
    return None


def _render(name: str, values: Dict[str, str]) -> str:
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as handle:
        text = handle.read()
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.search(r"@@[A-Z_]+@@", text)
    assert leftover is None, f"{name}: {leftover.group(0)} has no value"  # a template and its values disagree
    return text


def _overrides() -> str:
    ordered = sorted(SETTINGS, key=lambda s: (s.env not in FIRST_SETTINGS, FIRST_SETTINGS.index(s.env)
                                              if s.env in FIRST_SETTINGS else 0))
    return "\n".join(f"- `{s.env}`: {s.help}." for s in ordered)


def _copy_package(dest: str) -> None:
    """This tool's own package, as it runs now, without bytecode."""
    for current, dirs, names in os.walk(PACKAGE_DIR):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(current, PACKAGE_DIR)
        os.makedirs(os.path.join(dest, rel), exist_ok=True)
        for name in sorted(names):
            if not name.endswith((".pyc", ".pyo")):
                shutil.copyfile(os.path.join(current, name), os.path.join(dest, rel, name))


def _license() -> Optional[str]:
    try:
        dist = metadata.distribution("ensure-flydsl")
    except metadata.PackageNotFoundError:
        return None
    for name in ("licenses/LICENSE", "LICENSE"):
        text = dist.read_text(name)
        if text:
            return text
    return None


def _write(path: str, text: str, mode: int = 0o644) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, mode)


def _fill(staging: str, wheels: Dict[str, str], commit: str) -> List[str]:
    tool = os.path.join(staging, "tool")
    _copy_package(os.path.join(tool, "ensure_flydsl"))
    vendored = vendor.install_wheels(wheels, tool)
    _write(os.path.join(tool, "run.py"), _render("run.py.in", {}))
    license_text = _license()
    if license_text:
        _write(os.path.join(tool, "ensure_flydsl.LICENSE"), license_text)
    values = {"VERSION": __version__, "MIN_VERSION": DEFAULT_MIN_VERSION, "PIN_SHORT": DEFAULT_PIN[:8],
              "ROOT": DEFAULT_ROOT, "OVERRIDES": _overrides(),
              "EXIT_CODES": "\n".join(f"- `{int(code)}`: {code.meaning}" for code in ExitCode)}
    _write(os.path.join(staging, "skill.md"), _render("skill.md", values))
    _write(os.path.join(staging, "ensure_flydsl.sh"), _render("ensure_flydsl.sh", values), 0o755)
    _write(os.path.join(staging, ".gitignore"), "__pycache__/\n")
    made = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    _write(os.path.join(staging, "VERSION"),
           f"ensure-flydsl {__version__}\ncommit: {commit}\nmade: {made} by `ensure-flydsl skill` with Python "
           f"{sys.version.split()[0]}\nvendored: {', '.join(vendored)}\n")
    return vendored


def _manifest(staging: str, commit: str) -> None:
    files = {}
    for current, dirs, names in os.walk(staging):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(current, name)
            files[os.path.relpath(path, staging)] = file_sha256(path)
    atomic_write_json(os.path.join(staging, MANIFEST),
                      {"made_by": MADE_BY, "version": __version__, "commit": commit, "files": files})


def write_skill_folder(target: str, *, force: bool, wheels: Optional[str], environ: Dict[str, str],
                       say: Callable[[str], None]) -> SkillFolder:
    target = os.path.abspath(target)
    why = refusal(target, force)
    if why is not None:
        raise BadInput("DIR", target, why)
    if wheels is not None:
        wheels = os.path.abspath(wheels)
    found = vendor.find_wheels(wheels, environ, say)
    commit = tool_commit()
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.making-", dir=parent)
    try:
        os.chmod(staging, 0o755)
        vendored = _fill(staging, found, commit)
        _manifest(staging, commit)
        replaced = os.path.lexists(target)
        aside = move_aside(target) if replaced else None
        try:
            rename_into_place(staging, target)
        except BaseException:
            if aside is not None:
                rename_into_place(aside, target)  # the old folder back where it was
            raise
    except BaseException:
        remove_tree(staging)
        raise
    if aside is not None:
        remove_tree(aside)  # the old folder, proven above to hold only what this command wrote
    return SkillFolder(path=target, version=__version__, commit=commit, vendored=vendored, replaced=replaced)
