"""The libraries the GEAK folder vendors for a bare ``python3`` (3.9 on, which newer releases dropped): pinned
pure-Python wheels from ``--wheels DIR``, this user's cache or the package index, checked against their sha256."""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Stage
from ensure_flydsl.layout import host_cache_dir, vendored_wheels_dir
from ensure_flydsl.support.files import file_sha256, move_into_place
from ensure_flydsl.support.processes import CommandFailed, cmd_output
from ensure_flydsl.ways.release.download import release_pip


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
    if wheels is not None:
        found = {p.name: os.path.join(wheels, p.filename) for p in VENDORED}
        bad = [p.filename for p in VENDORED if not _good(found[p.name], p)]
        if bad:
            raise BadInput("--wheels", wheels, f"a folder holding {', '.join(p.filename for p in VENDORED)} (each "
                           f"checked against its pinned sha256; missing or different: {', '.join(bad)})")
        return found
    host = host_cache_dir(environ)  # None: no user cache folder (HOME and XDG_CACHE_HOME not absolute)
    cache = vendored_wheels_dir(host) if host is not None else tempfile.mkdtemp(prefix="ensure-flydsl-wheels-")
    missing = [p for p in VENDORED if not _good(os.path.join(cache, p.filename), p)]
    if missing:
        say(f"downloading {', '.join(f'{p.name} {p.version}' for p in missing)} (pure-Python wheels, for "
            f"Python 3.9 to 3.14) into {cache}")
        _download(missing, cache, environ)
    return {p.name: os.path.join(cache, p.filename) for p in VENDORED}


def _download(missing: Sequence[Pinned], cache: str, environ: Dict[str, str]) -> None:
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
            move_into_place(got, os.path.join(cache, pinned.filename))


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
