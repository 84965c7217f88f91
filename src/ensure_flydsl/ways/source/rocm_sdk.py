"""ROCm installed from the package index: TheRock's ``rocm`` wheels put a ``rocm-sdk`` command beside the
interpreter, and ``rocm-sdk path --root`` prints the prefix that holds ROCm (``lib/cmake/hip`` ...).
FlyDSL's own CI builds against it.  The tool uses it when the configured ROCm (``ROCM_PATH``, default
``/opt/rocm``) has no hip CMake package, and says so; a configured ROCm that has one always wins.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple

from ensure_flydsl.errors import Stage
from ensure_flydsl.support.processes import run_captured
from ensure_flydsl.ways.checks import MISSING, WRONG, Check, RunContext, passed, skipped
from ensure_flydsl.ways.source.rocm import check_hip

ROCM_SDK = "rocm-sdk"
ROCM_SDK_TIMEOUT = 30.0  # it imports its Python package; a cold start on a busy machine takes seconds


@dataclass(frozen=True)
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


def check_hip_package(ctx: RunContext) -> Check:
    needs, s = ctx.needs, ctx.settings
    if not (needs.hip or needs.hip_optional):
        return skipped("hip", "the pin's CMake files do not ask for hip", Stage.BUILD)
    blocking = needs.hip
    asked = f"{needs.hip_where} does find_package(hip{' REQUIRED' if needs.hip else ''})"
    rocm = choose_rocm(s.rocm_path, ctx.interpreter.executable if ctx.interpreter else s.python, ctx.environ)
    prefixes = [rocm.path] + [p for p in ctx.environ.get("CMAKE_PREFIX_PATH", "").split(os.pathsep) if p]
    label = s.label("rocm_path")
    if rocm.rocm_sdk is not None:
        asked += f"; ROCm: {rocm.said(label)}"
    for prefix in prefixes:
        check = check_hip(prefix)
        if check.package_dir is None:
            continue
        if check.needs_fix and prefix != rocm.path:
            return Check(name="hip",
                         status=WRONG,
                         detail=f"{check.package_dir} (found through CMAKE_PREFIX_PATH) names "
                         f"{', '.join(check.missing)}, which is missing",
                         remedy=f"set {label}={prefix}: ensure-flydsl then "
                         "builds with a private corrected copy of the package",
                         blocking=blocking,
                         stage=Stage.BUILD)
        if check.needs_fix:
            fix = (f"--fix-rocm-in-place: links {', '.join(check.missing)} inside {prefix}/lib" if s.fix_rocm_in_place
                   else f"ensure-flydsl builds with a private corrected copy of the package ({prefix} untouched)")
            return Check(name="hip",
                         status=WRONG,
                         detail=f"{check.package_dir} names {', '.join(check.missing)}, which is missing "
                         f"(the library is {os.path.basename(str(check.actual))}); {fix}",
                         remedy="none needed",
                         blocking=False,
                         stage=Stage.BUILD,
                         provided=True)
        if check.unfixable:
            return Check(name="hip",
                         status=WRONG,
                         detail=f"{check.package_dir} names {', '.join(check.missing)}, and {prefix}/lib has "
                         "no libamdhip64 at all",
                         remedy="install ROCm's HIP runtime (the hip-runtime-amd package) or "
                         f"point {label} at a complete ROCm",
                         blocking=blocking,
                         stage=Stage.BUILD)
        return passed("hip", f"{check.package_dir} (names {', '.join(check.referenced) or 'no library'}, present); "
                   f"{asked}", Stage.BUILD)
    where = " or ".join([f"{label}={s.rocm_path}"] + (["CMAKE_PREFIX_PATH"] if len(prefixes) > 1 else []))
    return Check(name="hip",
                 status=MISSING,
                 detail=f"no hip CMake package (lib/cmake/hip) under {where}, nor from the package "
                 f"index ({rocm.tried}); {asked}",
                 remedy=f"install ROCm's HIP development files (hip-dev), or set {label} to the ROCm prefix holding "
                 "lib/cmake/hip, or install ROCm from the package index for the interpreter (its `rocm-sdk path "
                 "--root` is used then)",
                 blocking=blocking,
                 stage=Stage.BUILD)
