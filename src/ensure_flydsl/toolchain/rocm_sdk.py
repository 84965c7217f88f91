"""ROCm installed from the package index: TheRock's ``rocm`` wheels put a ``rocm-sdk`` command beside the
interpreter, and ``rocm-sdk path --root`` prints the prefix that holds ROCm (``lib/cmake/hip`` ...).
FlyDSL's own CI builds against it.  The tool uses it when the configured ROCm (``ROCM_PATH``, default
``/opt/rocm``) has no hip CMake package, and says so; a configured ROCm that has one always wins.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from typing import List, Mapping, Optional, Tuple

from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.toolchain.rocm import check_hip

ROCM_SDK = "rocm-sdk"
ROCM_SDK_TIMEOUT = 30.0  # it imports its Python package; a cold start on a busy machine takes seconds


@dataclasses.dataclass(frozen=True)
class RocmChoice:
    """The ROCm prefix a build uses, and how it was found (``rocm_sdk``: the command that printed it)."""

    path: str
    configured: str  # ROCM_PATH as configured (or its default)
    rocm_sdk: Optional[str] = None  # the rocm-sdk that gave ``path``; None: ``path`` is the configured one
    tried: str = ""  # what asking rocm-sdk said, when it was asked and gave nothing usable

    def said(self, label: str) -> str:
        """One line for a message: which ROCm and why."""
        if self.rocm_sdk is None:
            return f"{label}={self.path}"
        return (f"{self.path} (ROCm from the package index: `{self.rocm_sdk} path --root`; {label}={self.configured} "
                "has no hip CMake package)")


def rocm_sdk_candidates(python: Optional[str], environ: Mapping[str, str]) -> List[str]:
    """``rocm-sdk`` beside the target interpreter (its venv's bin), then on PATH."""
    found: List[str] = []
    if python:
        beside = os.path.join(os.path.dirname(python), ROCM_SDK)
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            found.append(beside)
    on_path = shutil.which(ROCM_SDK, path=environ.get("PATH"))
    if on_path and on_path not in found:
        found.append(on_path)
    return found


def rocm_sdk_root(exe: str, environ: Mapping[str, str], timeout: float = ROCM_SDK_TIMEOUT) -> Tuple[Optional[str], str]:
    """The prefix ``exe path --root`` prints, or (None, what went wrong)."""
    try:
        proc = run_captured([exe, "path", "--root"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, env=environ, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"`{exe} path --root` did not answer within {timeout:.0f} s"
    except OSError as exc:
        return None, f"`{exe} path --root` does not run: {exc.strerror}"
    lines = [line.strip() for line in proc.stdout.decode(errors="replace").splitlines() if line.strip()]
    if proc.returncode != 0 or not lines:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        return None, f"`{exe} path --root` exited with {proc.returncode}" + (f": {err[-1]}" if err else "")
    root = lines[-1]
    if not os.path.isabs(root) or not os.path.isdir(root):
        return None, f"`{exe} path --root` printed {root!r}, which is not a folder"
    return root, ""


def choose_rocm(configured: str, python: Optional[str], environ: Mapping[str, str]) -> RocmChoice:
    """The configured ROCm when it has a hip CMake package; else the package index's (``rocm-sdk``) when that
    has one; else the configured one, with what asking rocm-sdk said."""
    if check_hip(configured).package_dir is not None:
        return RocmChoice(configured, configured)
    said: List[str] = []
    for exe in rocm_sdk_candidates(python, environ):
        root, problem = rocm_sdk_root(exe, environ)
        if root is None:
            said.append(problem)
        elif check_hip(root).package_dir is None:
            said.append(f"`{exe} path --root` is {root}, which has no hip CMake package either")
        else:
            return RocmChoice(root, configured, exe)
    return RocmChoice(configured, configured, tried="; ".join(said) or f"no {ROCM_SDK} command (ROCm from the "
                      "package index) beside the interpreter or on PATH")
