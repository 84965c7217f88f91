"""``ensure-flydsl skill DIR``: skill.md, the launcher, the tool as one zipapp with the pinned pure-Python wheels it
imports, and VERSION, which names the commit the tool is made from and every file's sha256, so that ``--force``
replaces only a folder this command wrote; the same tool writes the same bytes."""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import pathlib
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata, resources
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union
from urllib.parse import unquote

from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Stage
from ensure_flydsl.layout import host_cache_dir, vendored_wheels_dir
from ensure_flydsl.settings import DEFAULT_MIN_VERSION, DEFAULT_PIN, SETTINGS
from ensure_flydsl.source.git import Checkout
from ensure_flydsl.support.fields import json_object
from ensure_flydsl.support.files import (
    atomic_write,
    file_sha256,
    move_aside,
    move_into_place,
    read_json,
    remove_tree,
    rename_into_place,
)
from ensure_flydsl.support.processes import CommandFailed, cmd_output
from ensure_flydsl.version import __version__
from ensure_flydsl.warm import DEFAULT_ROOT, read_regular
from ensure_flydsl.ways.release.download import release_pip

ZIPAPP = "ensure_flydsl.pyz"
SCRIPT = "ensure_flydsl.sh"
HASHED = ("skill.md", SCRIPT, ZIPAPP)  # VERSION names their sha256 (ensure_flydsl.sh checks the zipapp's)
MADE_BY = "made by `ensure-flydsl skill`"
LEGACY_MANIFEST = ".ensure-flydsl-skill.json"  # the folder's first shape: tool/ and this manifest
LEGACY_MADE_BY = "ensure-flydsl skill"
COMMIT = r"^[0-9a-f]{40}( with local changes)?$"  # what tool_commit says of code that is a commit's
CARRIED_COMMIT = "COMMIT"  # in the zipapp's package: the commit it was written from (VERSION's)
ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # every member's: two writes of the same files are the same bytes
# The overrides GEAK's skill has always offered (the bash script's own), listed first in skill.md.
FIRST_SETTINGS = ("FLYDSL_ROOT", "FLYDSL_MIN_VERSION", "FLYDSL_BUILD_LOCK")
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the ensure_flydsl package


@dataclass(frozen=True)
class SkillFolder:
    path: str
    version: str
    commit: str
    vendored: List[str]
    replaced: bool


# -- the commit the folder is made from: the checkout this tool runs from, else the one pip installed it from,
# while that still holds exactly the installed code; never claimed for code it does not hold.
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


# -- the libraries vendored for a bare python3 (3.9 on, which newer releases dropped): pinned pure-Python
# wheels from --wheels DIR, this user's cache or the package index, checked against their sha256.
@dataclass(frozen=True)
class Pinned:
    name: str
    version: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-py3-none-any.whl"


# The newest releases that still support Python 3.9 (Requires-Python), all pure Python.
VENDORED = (
    Pinned("packaging", "26.3", "d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c"),
    Pinned("filelock", "3.19.1", "d38e30481def20772f5baf097c122c3babc4fcdb7e14e57049eb9d88c6dc017d"),
    Pinned("installer", "0.7.0", "05d1933f0a5ba7d8d6296bb6d5018e7c94fa473ceb10cf198a92ccea19c27b53"),
)
DOWNLOAD_TIMEOUT_S = 300.0
# What the wheels hold that the tool never imports (installer's Windows launchers, most of packaging): GEAK's
# pre-commit refuses files over 500 KB.
LEFT_OUT = ("installer/__main__.py", "installer/_scripts/*.exe", "packaging/licenses/*", "packaging/metadata.py",
            "packaging/pylock.py", "packaging/ranges.py", "packaging/dependency_groups.py",
            "packaging/direct_url.py", "packaging/errors.py", "packaging/_structures.py", "*.dist-info/RECORD",
            "*.dist-info/INSTALLER")


def _good(path: str, pinned: Pinned) -> bool:
    return os.path.isfile(path) and not os.path.islink(path) and file_sha256(path) == pinned.sha256


def find_wheels(wheels: Optional[str], environ: Dict[str, str], say: Callable[[str], None]) -> Dict[str, str]:
    """Each pinned wheel, checked: from ``wheels`` (all of them), else the cache, else downloaded into it."""
    cache = wheels
    if cache is None:
        host = host_cache_dir(environ)  # None: no user cache folder (HOME and XDG_CACHE_HOME not absolute)
        cache = vendored_wheels_dir(host) if host is not None else tempfile.mkdtemp(prefix="ensure-flydsl-wheels-")
    found = {p.name: os.path.join(cache, p.filename) for p in VENDORED}
    missing = [p for p in VENDORED if not _good(found[p.name], p)]
    if wheels is not None and missing:
        raise BadInput("--wheels", wheels, f"a folder holding {', '.join(p.filename for p in VENDORED)} (each "
                       f"checked against its pinned sha256; missing or different: "
                       f"{', '.join(p.filename for p in missing)})")
    if not missing:
        return found
    say(f"downloading {', '.join(f'{p.name} {p.version}' for p in missing)} (pure-Python wheels, for "
        f"Python 3.9 to 3.14) into {cache}")
    # this interpreter if it has pip (not under `uv tool install`), else ``python3`` on PATH if it has
    python, _ = release_pip(shutil.which("python3", path=environ.get("PATH")) or sys.executable, environ)
    names = " ".join(p.filename for p in missing)
    if python is None:
        raise EnsureError(ExitCode.ARTIFACT, f"no pip to download {names} with (neither {sys.executable} nor "
                          "python3 on PATH has one)", stage=Stage.SKILL,
                          hint="download them on a machine with pip (`pip download --no-deps --only-binary :all: "
                          + " ".join(f"{p.name}=={p.version}" for p in missing) + "`) and pass --wheels DIR")
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=cache) as tmp:
        requirements = os.path.join(tmp, "requirements.txt")
        with open(requirements, "w") as handle:
            handle.writelines(f"{p.name}=={p.version} --hash=sha256:{p.sha256}\n" for p in missing)
        cmd: List[str] = [python, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                          "--only-binary", ":all:", "--require-hashes", "--dest", tmp, "-r", requirements]
        try:
            cmd_output(cmd, timeout=DOWNLOAD_TIMEOUT_S, env=environ)
        except CommandFailed as exc:
            raise EnsureError(ExitCode.ARTIFACT, f"could not download {names} from the package index",
                              stage=Stage.SKILL, detail=exc.describe(),
                              hint="check pip's index settings (PIP_INDEX_URL, pip.conf), or pass --wheels DIR "
                              "with those files") from None
        for pinned in missing:
            got = os.path.join(tmp, pinned.filename)
            if not _good(got, pinned):  # pip checked the hash; a different file name is not the pin
                raise EnsureError(ExitCode.ARTIFACT, f"pip did not download {pinned.filename}", stage=Stage.SKILL)
            move_into_place(got, found[pinned.name])
    return found


def wheel_files(wheels: Dict[str, str]) -> Dict[str, bytes]:
    """What the pure-Python wheels install into purelib, but LEFT_OUT: each member as it is (their sha256 is pinned)."""
    files: Dict[str, bytes] = {}
    for pinned in VENDORED:
        with zipfile.ZipFile(wheels[pinned.name]) as archive:
            for info in archive.infolist():
                if ".data/" in info.filename:  # scripts, headers, data: none of these wheels has any
                    raise EnsureError(ExitCode.INTERNAL, f"a vendored wheel holds files outside purelib: "
                                      f"{info.filename}", stage=Stage.SKILL)
                if not info.is_dir() and not any(fnmatch.fnmatch(info.filename, p) for p in LEFT_OUT):
                    files[info.filename] = archive.read(info)
    return files


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
    if not isinstance(files, dict) or not all(isinstance(v, str) and _HEX64.match(v) for v in files.values()):
        return None  # (a JSON object's keys are strings)
    return {**files, LEGACY_MANIFEST: ""}


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
    """``-V``'s line: the version, and the commit the zipapp this runs from carries (or its copy unpacked in the
    cache folder), else the checkout's."""
    if os.path.basename(os.path.dirname(PACKAGE_DIR)) == ZIPAPP:  # DIR/ensure_flydsl.pyz/ensure_flydsl
        commit = (resources.files("ensure_flydsl") / CARRIED_COMMIT).read_bytes().decode(errors="replace")
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
    files = wheel_files(wheels)
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
    found = find_wheels(None if wheels is None else os.path.abspath(wheels), environ, say)
    commit, vendored = tool_commit(), [f"{p.name} {p.version}" for p in VENDORED]
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
