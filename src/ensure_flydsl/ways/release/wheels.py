"""A release wheel: its shape and provenance against the checkout's sources (read as a zip, before any of it is
installed), its install with pypa's ``installer`` (every file checked against RECORD), its versions."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import pathlib
import re
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, cast

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.exceptions import InstallerError
from installer.records import parse_record_file
from installer.sources import WheelFile
from installer.utils import parse_metadata_file
from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import EnsureError, ExitCode, Stage
from ensure_flydsl.layout import FLYDSL_SOURCES
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.source.requirements import tag_version

_VERSION_ASSIGN = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def static_version(init_file: str) -> Optional[str]:
    """``__version__`` read as text (FlyDSL's is a static string), never imported."""
    try:
        with open(init_file, encoding="utf-8", errors="replace") as handle:
            match = _VERSION_ASSIGN.search(handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def install_wheel_file(interpreter: Interpreter, wheel: str, version: str, target: str,
                       sink: Callable[[str], None]) -> None:
    """Unpack ``wheel`` into the new folder ``target`` as ``pip install --target`` would; every file is
    hashed as it is written and checked against the wheel's RECORD, which must name every file."""
    destination = _CheckedDestination(target, interpreter.executable)
    try:
        with WheelFile.open(pathlib.Path(wheel)) as source:
            source.validate_record(validate_contents=False)  # names only: the contents are hashed once, below
            install(source, cast(Any, destination), additional_metadata={"INSTALLER": b"ensure-flydsl\n"})
            destination.check_against(source)
    except (InstallerError, ValueError, OSError, zipfile.BadZipFile) as exc:
        sink(f"installing {wheel}: {exc}")
        raise EnsureError(ExitCode.ARTIFACT, f"the flydsl=={version} wheel {os.path.basename(wheel)} could not be "
                          f"installed: {exc}", stage=Stage.RELEASE, hint="the download is damaged or not a valid "
                          "wheel; run again, or use FLYDSL_STRATEGY=source") from None
    sink(f"installed {len(destination.written)} files of {os.path.basename(wheel)} into {target}, each "
         f"matching the wheel's RECORD")


class _CheckedDestination:
    """installer's destination for ``pip install --target``, keeping each file's hash and size for RECORD."""

    def __init__(self, target: str, python: str) -> None:
        schemes = {"purelib": target, "platlib": target, "headers": os.path.join(target, "include"),
                   "scripts": os.path.join(target, "bin"), "data": target}
        self._inner = SchemeDictionaryDestination(schemes, interpreter=python, script_kind="posix")
        self.written: Dict[str, Tuple[Optional[str], Optional[int]]] = {}  # wheel path -> (sha256, size)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    def write_file(self, scheme: str, path: str, stream: IO[bytes], is_executable: bool) -> object:
        entry = self._inner.write_file(scheme, path, stream, is_executable)  # type: ignore[arg-type]
        hashed = entry.hash_
        self.written[f"{scheme}/{path}"] = (hashed.value if hashed and hashed.name == "sha256" else None, entry.size)
        return entry

    def check_against(self, source: Any) -> None:
        """Every file written has the sha256 and size its RECORD line gives."""
        purelib = str(parse_metadata_file(source.read_dist_info("WHEEL")).get("Root-Is-Purelib", "")).lower()
        root, data = "purelib" if purelib == "true" else "platlib", source.data_dir + "/"
        wrong = []
        for path, digest, size in parse_record_file(source.read_dist_info("RECORD").splitlines()):
            if path.endswith(("/", ".dist-info/RECORD", ".dist-info/RECORD.jws", ".dist-info/RECORD.p7s")):
                continue
            # the scheme/path installer writes it to
            got = self.written.get("/".join(path[len(data):].partition("/")[::2]) if path.startswith(data)
                                   else f"{root}/{path}")
            want = (digest.partition("=")[2] if digest.startswith("sha256=") else None, int(size) if size else None)
            if got is None or want[0] is None or want != got:  # RECORD's digest is urlsafe base64, as installer's
                wrong.append(path)
        if wrong:
            raise ValueError(f"{len(wrong)} files do not match the wheel's RECORD, e.g. {wrong[0]}")


@dataclass(frozen=True)
class Provenance:
    """How a wheel's package compares with the checkout's ``python/flydsl``; ``foreign``: the wheel's files
    a FlyDSL wheel must not hold, each as ``name (why)``."""

    compared: Tuple[str, ...]
    differ: Tuple[str, ...]
    missing: Tuple[str, ...]
    foreign: Tuple[str, ...] = ()

    @property
    def proven(self) -> bool:
        return bool(self.compared) and not self.differ and not self.missing and not self.foreign

    def summary(self) -> str:
        """``3 of 48 files differ, e.g. flydsl/__init__.py`` (and the missing ones), for the one line."""
        total = len(self.compared)
        if not total:
            return "the checkout has no files in python/flydsl to compare"
        parts = [f"{len(found)} of {total} files {what}, e.g. flydsl/{found[0]}"
                 for found, what in ((self.differ, "differ"), (self.missing, "are not in the wheel")) if found]
        if self.foreign:
            parts.append(f"the wheel holds {len(self.foreign)} files a FlyDSL wheel must not, e.g. {self.foreign[0]}")
        return "; ".join(parts) if parts else f"all {total} files are byte-identical"


def check_provenance(wheel: str, sources: str, files: Sequence[str]) -> Provenance:
    """Compare each of ``files`` (relative to ``sources``) with ``flydsl/<path>`` in the wheel.  Files only in
    the wheel (the generated ``_mlir``) are not compared, but every name must fit :func:`shape_problems`."""
    differ: List[str] = []
    missing: List[str] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            infos = archive.infolist()
            foreign = shape_problems([info.filename for info in infos], files)
            members = {info.filename: info for info in infos if not info.is_dir()}
            for rel in files:
                info = members.get("flydsl/" + rel)
                if info is None:
                    missing.append(rel)
                    continue
                path = os.path.join(sources, rel)
                try:
                    mine = pathlib.Path(path).read_bytes()
                except OSError as exc:
                    raise EnsureError(ExitCode.CHECKOUT, f"cannot read {path} of the checkout: {exc.strerror}",
                                      stage=Stage.RELEASE, hint="the checkout is damaged; run again to restore it"
                                      ) from None
                if info.file_size != len(mine) or archive.read(info) != mine:
                    differ.append(rel)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise EnsureError(ExitCode.ARTIFACT, f"cannot read the wheel {wheel}: {exc}", stage=Stage.RELEASE,
                          hint="the download is damaged; run again, or use FLYDSL_STRATEGY=source") from None
    return Provenance(tuple(files), tuple(differ), tuple(missing), tuple(foreign))


def check_versions(tag: str, root: str, installed: Optional[str] = None) -> None:
    """The tag, the checkout's ``__version__`` and, once the wheel is ``installed`` (its folder), the wheel's
    metadata and installed ``__version__`` agree, or kernels and package are of two releases."""
    seen = {"the checkout's __version__": static_version(os.path.join(root, FLYDSL_SOURCES, "__init__.py"))}
    if installed is not None:
        seen["the wheel's metadata"] = next((d.version for d in importlib.metadata.distributions(path=[installed])
                                             if d.metadata["Name"] == "flydsl"), None)
        seen["the installed __version__"] = static_version(os.path.join(installed, "flydsl", "__init__.py"))
    expected = tag_version(tag) or tag

    def same(version: Optional[str]) -> bool:
        with contextlib.suppress(InvalidVersion):
            return version is not None and Version(version) == Version(expected)
        return False

    wrong = {what: v for what, v in seen.items() if not same(v)}
    if wrong:
        detail = ", ".join(f"{what} is {v}" for what, v in wrong.items())
        raise EnsureError(ExitCode.ARTIFACT, f"the release {tag} does not agree with itself: {detail}",
                          stage=Stage.RELEASE,
                          hint="the tag and the published wheel differ; use FLYDSL_STRATEGY=source")


# The shape of a FlyDSL wheel: what runs beside or before the pin's sources is refused.
_DIST_INFO = re.compile(r"flydsl-[A-Za-z0-9_.+!]+\.dist-info")
_TOP = ("flydsl", "flydsl.libs")
_EXTENSION = (".so", ".pyd")
_SITE_HOOKS = ("sitecustomize", "usercustomize")


def shape_problems(names: Sequence[str], tracked: Sequence[str]) -> List[str]:
    """Each of the wheel's member ``names`` a FlyDSL wheel must not hold, as ``name (why)``; ``tracked`` are
    the pin's files in ``python/flydsl`` (nothing may shadow one of their modules)."""
    modules = {"flydsl/" + rel[: -len(".py")] for rel in tracked if rel.endswith(".py")}  # flydsl/compiler/x
    return [f"{name} ({why})" for name in names if (why := _why_refused(name, modules))]


def _why_refused(name: str, modules: Set[str]) -> str:
    path = name[:-1] if name.endswith("/") else name  # a folder entry
    parts = path.split("/")
    if not path or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    top = parts[0]
    if top not in _TOP and not _DIST_INFO.fullmatch(top):
        if top.split(".")[0] in _SITE_HOOKS:
            return "a site customisation module, run by every interpreter that has it on its path"
        if top.endswith(".pth"):
            return "a .pth file, run by every interpreter that has it on its site path"
        return "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/"
    if "__pycache__" in parts:
        return "bytecode, which the import system may run instead of the sources"
    leaf = parts[-1]
    if leaf.endswith(".pth"):
        return "a .pth file"
    if top != "flydsl" or len(parts) < 2:
        return ""
    folder = "/".join(parts[:-1])
    if folder in modules and leaf.startswith("__init__."):
        return f"a package that shadows the tracked module {folder}.py"
    stem = leaf.split(".")[0]
    if leaf.endswith(_EXTENSION) and f"{folder}/{stem}" in modules:
        return f"an extension module that shadows the tracked module {folder}/{stem}.py"
    return ""
