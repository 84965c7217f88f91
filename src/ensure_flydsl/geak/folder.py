"""``ensure-flydsl skill DIR``: skill.md, the launcher, the tool as one zipapp and VERSION, which names every file's
sha256 so that ``--force`` replaces only a folder this command wrote; the same tool writes the same bytes."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from typing import Callable, Dict, List, Optional, Tuple, Union

from ensure_flydsl.errors import BadInput, ExitCode
from ensure_flydsl.geak import vendor
from ensure_flydsl.geak.provenance import PACKAGE_DIR, package_files, tool_commit, tool_source
from ensure_flydsl.settings import DEFAULT_MIN_VERSION, DEFAULT_PIN, SETTINGS
from ensure_flydsl.support.files import atomic_write, file_sha256, move_aside, read_json, remove_tree, rename_into_place
from ensure_flydsl.version import __version__
from ensure_flydsl.warm import DEFAULT_ROOT, read_regular

ZIPAPP = "ensure_flydsl.pyz"
SCRIPT = "ensure_flydsl.sh"
HASHED = ("skill.md", SCRIPT, ZIPAPP)  # VERSION names their sha256 (ensure_flydsl.sh checks the zipapp's)
MADE_BY = "made by `ensure-flydsl skill`"
LEGACY_MANIFEST = ".ensure-flydsl-skill.json"  # the folder's first shape: tool/ and this manifest
LEGACY_MADE_BY = "ensure-flydsl skill"
COMMIT = r"^[0-9a-f]{40}( with local changes)?$"  # what geak/provenance.py says of code that is a commit's
CARRIED_COMMIT = "COMMIT"  # in the zipapp's package: the commit it was written from (VERSION's)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every member's: two writes of the same files are the same bytes
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


def _version(folder: str) -> Optional[Tuple[Dict[str, str], str]]:
    """The sha256 of each file and the commit VERSION in ``folder`` names, when this command wrote it."""
    raw = read_regular(os.path.join(folder, "VERSION"), 65536, head=True)
    try:
        lines = raw.decode().splitlines() if raw is not None else []
    except UnicodeDecodeError:
        return None
    if not lines or not lines[0].startswith("ensure-flydsl ") or MADE_BY not in lines:
        return None
    hashes = {words[2]: words[1] for words in (line.split() for line in lines if line.startswith("sha256: "))
              if len(words) == 3 and _HEX64.match(words[1])}
    commit = next((line[len("commit: "):] for line in lines if line.startswith("commit: ")), "")
    return (hashes, commit) if set(hashes) == set(HASHED) else None


def _made_files(folder: str) -> Optional[Dict[str, str]]:
    """The files this command wrote in ``folder`` (path: sha256; VERSION itself: ""), else None."""
    version = _version(folder)
    if version is not None:
        return {**version[0], "VERSION": ""}
    data = read_json(os.path.join(folder, LEGACY_MANIFEST))
    files = data.get("files") if data is not None and data.get("made_by") == LEGACY_MADE_BY else None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and _HEX64.match(v)
                                              for k, v in files.items()):
        return None
    return {**{str(k): str(v) for k, v in files.items()}, LEGACY_MANIFEST: ""}


def _not_ours(folder: str, made: Dict[str, str]) -> List[str]:
    """Every entry of ``folder`` that is not a file this command wrote, as it wrote it."""
    foreign: List[str] = []

    def unreadable(exc: OSError) -> None:  # it may hold anything, and the replace would stop half way in it
        foreign.append(os.path.relpath(str(exc.filename), folder) + " (unreadable)")

    for current, dirs, names in os.walk(folder, onerror=unreadable):
        if not dirs + names and current != folder:  # an empty folder: somebody's (this command writes none)
            foreign.append(os.path.relpath(current, folder))
        for name in dirs + names:
            path = os.path.join(current, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path) or (name in names and not os.path.isfile(path)):
                foreign.append(rel)
            # Python's bytecode in a folder of the first shape (tool/): written when it ran.
            elif name in names and made.get(rel) != "" and not (os.path.basename(current) == "__pycache__" and
                                                                 name.endswith(".pyc")) and \
                    made.get(rel) != file_sha256(path):
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
        return ("it exists and was not made by `ensure-flydsl skill` (no VERSION of its writing in it): nothing was "
                "changed; move it away yourself (GEAK's own folder: `git rm -r` it) or choose another path")
    if not force:
        return "it is a folder this command made: add --force to replace it"
    foreign = _not_ours(target, made)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        return f"it holds files this command did not write ({shown}): nothing was changed; move them away first"
    return None


def version_line() -> str:
    """``-V``'s line: the version, and the commit VERSION names while it hashes the zipapp this runs from, else the
    one the zipapp carries (its copy unpacked in the cache folder, named by that sha256), else the checkout's."""
    zipapp = os.path.dirname(PACKAGE_DIR)  # DIR/ensure_flydsl.pyz/ensure_flydsl in a folder
    if os.path.basename(zipapp) == ZIPAPP:
        version = _version(os.path.dirname(zipapp))
        commit = version[1] if version is not None and version[0][ZIPAPP] == file_sha256(zipapp) else ""
    else:
        carried = read_regular(os.path.join(PACKAGE_DIR, CARRIED_COMMIT), 100)
        commit = carried.decode(errors="replace") if carried is not None else tool_commit()
    return f"ensure-flydsl {__version__}" + (f" (commit {commit})" if re.match(COMMIT, commit) else "")


def _template(name: str, values: Dict[str, str]) -> str:
    text = (resources.files("ensure_flydsl.geak") / "templates" / name).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    leftover = re.search(r"@@[A-Z_]+@@", text)
    assert leftover is None, f"{name}: {leftover.group(0)} has no value"  # a template and its values disagree
    return text


def _overrides() -> str:
    ordered = sorted(SETTINGS, key=lambda s: FIRST_SETTINGS.index(s.env) if s.env in FIRST_SETTINGS else len(SETTINGS))
    return "\n".join(f"- `{s.env}`: {s.help}." for s in ordered)


def zipapp_bytes(wheels: Dict[str, str], commit: str) -> bytes:
    """The tool (and the commit it is written from), its vendored libraries and the launcher as one zipapp."""
    files = vendor.wheel_files(wheels)
    files.update(package_files(resources.files("ensure_flydsl"), "ensure_flydsl/"))
    files["__main__.py"] = _template("__main__.py.in", {}).encode()
    files[f"ensure_flydsl/{CARRIED_COMMIT}"] = commit.encode()
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for name in sorted(files):
            member = zipfile.ZipInfo(name, ZIP_TIME)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, files[name], compresslevel=9)
    return data.getvalue()


def _write(path: str, data: Union[str, bytes], mode: int = 0o644) -> str:
    """Writes ``data`` at ``path``; its sha256."""
    raw = data.encode() if isinstance(data, str) else data
    atomic_write(path, raw, mode)
    return hashlib.sha256(raw).hexdigest()


def _fill(staging: str, wheels: Dict[str, str], commit: str, vendored: List[str]) -> None:
    values = {"VERSION": __version__, "MIN_VERSION": DEFAULT_MIN_VERSION, "PIN_SHORT": DEFAULT_PIN[:8],
              "ROOT": DEFAULT_ROOT, "OVERRIDES": _overrides(), "ZIPAPP": ZIPAPP,
              "EXIT_CODES": "\n".join(f"- `{int(code)}`: {code.meaning}" for code in ExitCode)}
    hashes = {"skill.md": _write(os.path.join(staging, "skill.md"), _template("skill.md", values)),
              SCRIPT: _write(os.path.join(staging, SCRIPT), _template(SCRIPT, values), 0o755),
              ZIPAPP: _write(os.path.join(staging, ZIPAPP), zipapp_bytes(wheels, commit))}
    _write(os.path.join(staging, "VERSION"), "\n".join([
        f"ensure-flydsl {__version__}", f"source: {tool_source()}", f"commit: {commit}",
        f"vendored: {', '.join(vendored)}", MADE_BY, *(f"sha256: {hashes[name]}  {name}" for name in HASHED)]) + "\n")


def write_skill_folder(target: str, *, force: bool, wheels: Optional[str], environ: Dict[str, str],
                       say: Callable[[str], None]) -> SkillFolder:
    target = os.path.abspath(target)
    why = refusal(target, force)
    if why is not None:
        raise BadInput("DIR", target, why)
    found = vendor.find_wheels(None if wheels is None else os.path.abspath(wheels), environ, say)
    commit, vendored = tool_commit(), [f"{p.name} {p.version}" for p in vendor.VENDORED]
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.making-", dir=parent)
    try:
        os.chmod(staging, 0o755)
        _fill(staging, found, commit, vendored)
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
