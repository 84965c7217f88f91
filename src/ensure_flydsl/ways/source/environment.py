"""The environment of a source build's steps: shims of the target interpreter first on PATH (FlyDSL's scripts
call ``python3`` and ``pip``), pip held to a private ``pylib`` and the constraints file, the jobs, the LLVM
record."""

from __future__ import annotations

import os
import pathlib
import shlex
from dataclasses import asdict, dataclass
from typing import Dict, Mapping, Optional, Sequence

from ensure_flydsl.layout import llvm_record, mlir_install, pip_constraints, tools_dir
from ensure_flydsl.probe.results import Interpreter
from ensure_flydsl.settings import GitMirrors
from ensure_flydsl.source.git import with_mirrors, with_network_limits
from ensure_flydsl.source.llvm_inputs import checkout_llvm_inputs
from ensure_flydsl.support import fields
from ensure_flydsl.support.files import atomic_write, atomic_write_json, read_json
from ensure_flydsl.ways.package_index import CONFLICTING_PIP_ENV

MEMORY_PER_JOB_BYTES = 4 * 1024**3  # a job of the LLVM/MLIR build (its big static links) may take this much


def default_jobs(cores: int, available_memory: Optional[int]) -> int:
    """Cores, capped so that every job has MEMORY_PER_JOB_BYTES: the default never OOMs a small machine."""
    jobs = max(1, cores)
    if available_memory is not None:
        jobs = min(jobs, max(1, available_memory // MEMORY_PER_JOB_BYTES))
    return jobs


def available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_jobs(setting: Optional[int]) -> int:
    return setting if setting is not None else default_jobs(cpu_count(), available_memory())


@dataclass(frozen=True)
class Toolchain:
    bin_dir: str  # python3 / python / pip / pip3 shims for the target interpreter
    pylib: str  # private site folder for Python build tools (nanobind, ...)
    python: str  # the target interpreter (PYTHON_EXECUTABLE for the build)
    constraints: str  # the pip constraints file every pip install of the build is held to


def prepare_toolchain(root: str, interpreter: Interpreter, constraints: Sequence[str]) -> Toolchain:
    """The shims and private folders of the build steps; every ``pip install`` of the build is held to the
    requirement lines ``constraints``."""
    tools = tools_dir(root)
    bin_dir = os.path.join(tools, "bin")
    pylib = os.path.join(tools, "pylib")
    os.makedirs(bin_dir, exist_ok=True)
    os.makedirs(pylib, exist_ok=True)
    py = shlex.quote(interpreter.executable)
    python_shim = f'#!/bin/sh\nexec {py} "$@"\n'
    pip_shim = (
        "#!/bin/sh\n"
        "# FlyDSL's build_llvm.sh runs an unguarded `pip install ...`: keep it out of the interpreter's\n"
        "# site-packages by installing into ensure-flydsl's private folder (on PYTHONPATH for the build).\n"
        'if [ "$1" = install ]; then\n'
        "  shift\n"
        f"  exec {py} -m pip install --disable-pip-version-check --no-warn-script-location --upgrade "
        f'--target {shlex.quote(pylib)} "$@"\n'
        "fi\n"
        f'exec {py} -m pip "$@"\n'
    )
    for name, text in (("python3", python_shim), ("python", python_shim), ("pip", pip_shim), ("pip3", pip_shim)):
        atomic_write(os.path.join(bin_dir, name), text.encode(), mode=0o755)
    held = pip_constraints(tools)
    atomic_write(held, "".join(f"{line}\n" for line in constraints).encode())
    return Toolchain(bin_dir=bin_dir, pylib=pylib, python=interpreter.executable, constraints=held)


def build_environment(base: Mapping[str, str], toolchain: Toolchain, *, cmake_prefixes: Sequence[str],
                      rocm_path: str, mlir_path: Optional[str], jobs: int, git_mirrors: GitMirrors) -> Dict[str, str]:
    """The caller's environment for a build step, its scripts' git fetching through the mirrors too;
    ``cmake_prefixes`` (the hip overlay) are searched first."""
    env = {k: v for k, v in with_network_limits(with_mirrors(base, git_mirrors)).items()
           if k not in CONFLICTING_PIP_ENV}
    env["PATH"] = os.pathsep.join([toolchain.bin_dir, base.get("PATH", os.defpath)])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (toolchain.pylib, base.get("PYTHONPATH", "")) if p)
    # pip installs into the private pylib (replacing what an earlier run put there), held to the constraints
    # file: a file: URL, since pip splits a plain path at its spaces.
    env.update({"PIP_TARGET": toolchain.pylib, "PIP_UPGRADE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "PIP_NO_WARN_SCRIPT_LOCATION": "1", "PYTHON_EXECUTABLE": toolchain.python,
                "PIP_CONSTRAINT": pathlib.Path(os.path.abspath(toolchain.constraints)).as_uri()})
    prefixes = [*cmake_prefixes, *([base["CMAKE_PREFIX_PATH"]] if base.get("CMAKE_PREFIX_PATH") else [])]
    if prefixes:
        env["CMAKE_PREFIX_PATH"] = os.pathsep.join(prefixes)
    env["ROCM_PATH"] = rocm_path
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(jobs)
    env.pop("PYTHONHOME", None)
    if mlir_path:
        env["MLIR_PATH"] = mlir_path
    else:
        env.pop("MLIR_PATH", None)
    return env


def llvm_key(root: str, interpreter: Interpreter, environ: Optional[Mapping[str, str]] = None
             ) -> Optional[Dict[str, object]]:
    """The MLIR key of the checkout at ``root`` for ``interpreter``; None when its LLVM commit is unknown."""
    return checkout_llvm_inputs(root, os.environ if environ is None else environ).key(interpreter.abi)


def llvm_step_settings(base_dir: str) -> Dict[str, str]:
    """What the tool sets of build_llvm.sh's overridable variables: the install is always made, where the tool
    and build.sh look (the MLIR key leaves these out: llvm_inputs.TOOL_SET)."""
    return {"LLVM_INSTALL_DIR": mlir_install(base_dir), "LLVM_PACKAGE_INSTALL": "1"}


def is_mlir_install(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "lib", "cmake", "mlir"))


@dataclass(frozen=True)
class LlvmRecord(fields.Record):
    """``BASE/.llvm-project.ensure-flydsl.json``: this tool made ``llvm-project/``; the keys of the build it
    started there and of the one it finished."""

    created: bool = fields.checked(fields.boolean)
    started: Optional[Dict[str, object]] = fields.checked(fields.mapping, None)
    done: Optional[Dict[str, object]] = fields.checked(fields.mapping, None)

    @classmethod
    def read(cls, base_dir: str) -> Optional["LlvmRecord"]:
        return cls.from_json(read_json(llvm_record(base_dir)))

    def write(self, base_dir: str) -> None:
        atomic_write_json(llvm_record(base_dir), asdict(self))


def built_mlir(base_dir: str, key: Optional[Dict[str, object]]) -> Optional[str]:
    """The MLIR install of the LLVM/MLIR build for ``key`` this tool finished in ``BASE/llvm-project``, if there."""
    record = LlvmRecord.read(base_dir)
    install = mlir_install(base_dir)
    if key is None or record is None or record.done != key or not is_mlir_install(install):
        return None
    return install
