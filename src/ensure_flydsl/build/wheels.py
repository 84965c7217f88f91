"""The release strategy: the pin is a release tag's commit and the package index has its wheel.

Then nothing is built: the tag is checked out in the root (for ``kernels/`` and the sources) and the
``flydsl==X`` wheel for the TARGET interpreter is installed, without dependencies, into
``ROOT/build-fly/python_packages``, the layout of a source build.  The wheel is chosen by the target's
tags (Python version, ABI, this host's platform tags), not the tool's own, and fetched with pip under the
user's own pip configuration (PIP_INDEX_URL, PIP_FIND_LINKS, pip.conf) for private indexes and
wheelhouses.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Callable, List, Optional

from packaging.tags import platform_tags
from packaging.version import InvalidVersion, Version

from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.probe.interpreter import Interpreter
from ensure_flydsl.support.processes import CommandFailed, cmd_output

_VERSION_ASSIGN = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def tag_version(tag: str) -> Optional[str]:
    """``v0.2.2`` -> ``0.2.2``; None for a tag that is not a release (``v0.2.5.dev732`` is not)."""
    if not tag.startswith("v"):
        return None
    try:
        version = Version(tag[1:])
    except InvalidVersion:
        return None
    if version.is_devrelease or version.is_prerelease or version.local:
        return None
    return tag[1:]


def release_tags(tags: List[str]) -> List[str]:
    """The release versions among ``tags``, newest first."""
    versions = [v for v in (tag_version(t) for t in tags) if v]
    return sorted(versions, key=Version, reverse=True)


def pin_as_tag(pin: str) -> str:
    """Under ``--strategy release`` a pin may be a version: ``0.2.2`` names the tag ``v0.2.2``."""
    if re.fullmatch(r"[0-9a-fA-F]{7,40}", pin):
        return pin
    try:
        Version(pin)
    except InvalidVersion:
        return pin
    return pin if pin.startswith("v") else "v" + pin


def static_version(init_file: str) -> Optional[str]:
    """``__version__`` read as text (FlyDSL's is a static string): never imported into this process."""
    try:
        with open(init_file, encoding="utf-8", errors="replace") as handle:
            match = _VERSION_ASSIGN.search(handle.read())
    except OSError:
        return None
    return match.group(1) if match else None


def wheel_tags(interpreter: Interpreter) -> List[str]:
    """pip options that select wheels for the target interpreter on this host."""
    major, minor = interpreter.version.split(".")[:2]
    threading = re.match(r"cpython-\d+(t?)-", interpreter.soabi)
    abi = "cp" + major + minor + (threading.group(1) if threading else "")
    if interpreter.implementation != "cpython":
        raise EnsureError(ExitCode.ARTIFACT, f"FlyDSL wheels are for CPython; {interpreter.executable} is "
                          f"{interpreter.implementation}", stage="release")
    options = ["--python-version", f"{major}.{minor}", "--implementation", "cp", "--abi", abi]
    for platform in platform_tags():  # the target runs on this host: same libc, same architecture
        options += ["--platform", platform]
    return options


def install_wheel(interpreter: Interpreter, version: str, target: str, sink: Callable[[str], None]) -> None:
    """Install ``flydsl==version`` for ``interpreter`` into ``target`` (a new folder); raise EnsureError(8)."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary=:all:", "--no-compile",
           "--disable-pip-version-check", "--no-warn-script-location", "--target", target,
           *wheel_tags(interpreter), f"flydsl=={version}"]
    sink("$ " + " ".join(cmd))
    try:
        output = cmd_output(cmd)
    except CommandFailed as exc:
        for line in exc.output.splitlines():
            sink(line)
        lines = [line for line in exc.output.splitlines() if line.strip()]
        why = next((line.strip() for line in lines if "No matching distribution" in line or "ERROR" in line),
                   lines[-1].strip() if lines else f"pip exited with {exc.returncode}")
        raise EnsureError(
            ExitCode.ARTIFACT,
            f"no flydsl=={version} wheel could be installed for {interpreter.executable} "
            f"(Python {interpreter.version}, {interpreter.soabi}): {why}",
            stage="release",
            hint="the package index has no wheel for this interpreter (FlyDSL publishes cp310-cp314 "
            "manylinux x86_64); use another FLYDSL_PYTHON or FLYDSL_STRATEGY=source",
            detail=exc.describe(),
        ) from None
    for line in output.splitlines():
        sink(line)


def installed_version(target: str) -> Optional[str]:
    """The version in the installed wheel's metadata (``flydsl-X.dist-info/METADATA``)."""
    try:
        names = os.listdir(target)
    except OSError:
        return None
    for name in names:
        if name.startswith("flydsl-") and name.endswith(".dist-info"):
            try:
                with open(os.path.join(target, name, "METADATA"), encoding="utf-8", errors="replace") as handle:
                    for line in handle:
                        if line.startswith("Version:"):
                            return line.split(":", 1)[1].strip()
            except OSError:
                return None
    return None


def check_versions_agree(tag: str, checkout_version: Optional[str], wheel_version: Optional[str],
                         package_version: Optional[str]) -> None:
    """The tag, the checkout's __version__, the wheel's metadata and its __version__ must all agree, or the
    kernels and the package would come from different releases."""
    expected = tag_version(tag) or tag
    seen = {"the checkout's __version__": checkout_version, "the wheel's metadata": wheel_version,
            "the installed __version__": package_version}
    wrong = {what: v for what, v in seen.items() if not _same_version(v, expected)}
    if wrong:
        detail = ", ".join(f"{what} is {v}" for what, v in wrong.items())
        raise EnsureError(ExitCode.ARTIFACT, f"the release {tag} does not agree with itself: {detail}",
                          stage="release", hint="the tag and the published wheel differ; use FLYDSL_STRATEGY=source")


def _same_version(version: Optional[str], expected: str) -> bool:
    try:
        return version is not None and Version(version) == Version(expected)
    except InvalidVersion:
        return False
