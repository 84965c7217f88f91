"""FlyDSL-shaped git repositories and installed trees, made by the tests (no FlyDSL code in here).

The repository has what ensure-flydsl relies on: ``python/flydsl/__init__.py`` with a static
``__version__``; ``kernels/moe_gemm_2stage.py`` importing ``flydsl._mlir``, which only the build makes;
``thirdparty/llvm-hash.txt``; and ``scripts/build_llvm.sh`` / ``scripts/build.sh`` that behave like
FlyDSL's: build_llvm.sh installs into ``../llvm-project/mlir_install`` and build.sh auto-detects it (or
takes MLIR_PATH), calls ``python3`` from PATH, and stages ``build-fly/python_packages/flydsl`` (or
``$FLY_BUILD_DIR/python_packages/flydsl``).  The
generated ``_mlir`` refuses to import under another interpreter, as a compiled extension would.  build.sh
refuses an MLIR built from another LLVM commit than the checkout names, as FlyDSL's compile would fail.
``FixtureRepo.commit(layout=...)`` makes upstream's later shapes instead (LAYOUTS, below).

Knobs (environment variables read by the scripts):
  FIXTURE_COUNTER_DIR   folder where each script appends a line per run (llvm.count, build.count) and
                        touches ``<step>.started`` when it begins
  FIXTURE_LLVM_FAIL / FIXTURE_BUILD_FAIL   exit 1 from that script
  FIXTURE_LLVM_SLEEP / FIXTURE_BUILD_SLEEP seconds to sleep at each of its progress steps (the build's may be
                        one number per step, "0 60 0": its [2/3] then stands for a minute)
  FIXTURE_BUILD_NO_MLIR  stage flydsl but never write _mlir (a build that "succeeds" unusably)
  FIXTURE_LLVM_CLONE    a URL build_llvm.sh clones with git (into ../llvm-project/src), as FlyDSL's fetches
                        llvm-project, and whose last commit's subject it prints
  FIXTURE_PIP_INSTALL   arguments for a `pip install` in build_llvm.sh, as FlyDSL's runs one (`pip` from PATH;
                        `"$PYTHON_EXECUTABLE" -m pip` in the "next" layout); it must then be able to import
                        fixture_tool (make_tool_wheel)
  FIXTURE_CMAKE         build.sh configures and builds the checkout's top-level CMakeLists.txt with the real
                        cmake into build-fly, as FlyDSL's does (tests/build_fixtures.py writes one that
                        does find_package(hip REQUIRED CONFIG), runs patchelf, ... on request)
  FIXTURE_LLVM_HOOK     shell code build_llvm.sh evals after "compiling", before it installs MLIR
  FIXTURE_BUILD_HOOK    shell code build.sh evals after staging the package, just before it reports success
                        (``$PKG`` is the python_packages folder): leave a process behind, print a huge
                        line, break the staged flydsl
  FIXTURE_STAGED_HOOK   shell code build.sh evals once it has staged python_packages/flydsl, before the compiled
                        part (_mlir) exists: the half-built package a kill there leaves behind
  FIXTURE_NEEDS_PATCHELF build.sh runs `patchelf --version` after "compiling", as FlyDSL's
                        CopyFlyPythonSources does, and fails with 127 when patchelf is not on PATH
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from typing import Dict, List, Optional

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
    "GIT_COMMITTER_NAME": "Fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}

LLVM_HASH_A = "1111111111111111111111111111111111111111"
LLVM_HASH_B = "2222222222222222222222222222222222222222"

BUILD_LLVM_HEAD = r"""#!/bin/bash
# Test fixture standing in for FlyDSL's build_llvm.sh (same paths, same inputs; no LLVM).
# The fixture's knobs (FIXTURE_*) are read as "$NAME", never "${NAME:-default}": that form is how the
# script lets a caller change what is built, and ensure-flydsl keys the MLIR on each such variable.
set -e
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
BASE_DIR="$(cd "${REPO_ROOT}/.." && pwd)"
LLVM_SRC_DIR="$BASE_DIR/llvm-project"
"""

BUILD_LLVM_INPUTS = r"""LLVM_INSTALL_DIR="$LLVM_SRC_DIR/mlir_install"
LLVM_REF="$(tr -d '[:space:]' < "$REPO_ROOT/thirdparty/llvm-hash.txt")"
"""

# The v0.3.1 shape: the commit in llvm-build-info.json, upstream's override forms (nested for the commit).
BUILD_LLVM_INPUTS_V031 = r"""LLVM_INSTALL_DIR="${LLVM_INSTALL_DIR:-$LLVM_SRC_DIR/mlir_install}"
LLVM_INSTALL_TGZ="${LLVM_INSTALL_TGZ:-$LLVM_SRC_DIR/mlir_install.tgz}"
LLVM_PACKAGE_INSTALL="${LLVM_PACKAGE_INSTALL:-1}"
LLVM_BUILD_INFO="${REPO_ROOT}/thirdparty/llvm-build-info.json"
LLVM_COMMIT_DEFAULT=$(python3 -c "import json; print(json.load(open('${LLVM_BUILD_INFO}'))['upstream']['llvm_hash'])")
LLVM_REF="${LLVM_REF:-${LLVM_COMMIT:-$LLVM_COMMIT_DEFAULT}}"
if [ "$LLVM_PACKAGE_INSTALL" != 1 ]; then
  echo "not installing (LLVM_PACKAGE_INSTALL=$LLVM_PACKAGE_INSTALL)"
  exit 0
fi
"""

# The v0.3.2.dev838 shape: v0.3.1's, a patch applied to LLVM and a build profile (`-` without `:` for the
# runtimes, as upstream has it).
BUILD_LLVM_PROFILE = r"""LLVM_BUILD_PROFILE="${LLVM_BUILD_PROFILE:-full}"
case "${LLVM_BUILD_PROFILE}" in
  full)
    LLVM_TARGETS_TO_BUILD="${LLVM_TARGETS_TO_BUILD:-X86;NVPTX;AMDGPU}"
    LLVM_ENABLE_RUNTIMES="${LLVM_ENABLE_RUNTIMES-compiler-rt}"
    ;;
  amd-minimal)
    LLVM_TARGETS_TO_BUILD="X86;AMDGPU"
    LLVM_ENABLE_RUNTIMES=
    ;;
  *)
    echo "Unknown LLVM_BUILD_PROFILE: ${LLVM_BUILD_PROFILE}" >&2
    exit 2
    ;;
esac
echo "LLVM Profile:   $LLVM_BUILD_PROFILE"
"""
BUILD_LLVM_INPUTS_V032 = (BUILD_LLVM_INPUTS_V031 + 'LLVM_PATCH="${REPO_ROOT}/thirdparty/llvm-rocdl-lld-argv0.patch"\n'
                          + BUILD_LLVM_PROFILE + 'echo "LLVM Patch:     $(sha256sum "$LLVM_PATCH" | cut -c1-12)"\n')

# Upstream after the snapshot ("next"): the Python is PYTHON_EXECUTABLE's (python3 from PATH by default) and
# every patch in thirdparty/llvm-patches/ is applied.
BUILD_LLVM_INPUTS_NEXT = (BUILD_LLVM_INPUTS_V031.replace("$(python3 -c", '$("$PYTHON_EXECUTABLE" -c').replace(
    'LLVM_BUILD_INFO="', 'PYTHON_EXECUTABLE="${PYTHON_EXECUTABLE:-python3}"\nLLVM_BUILD_INFO="')
    + 'LLVM_PATCH_DIR="${REPO_ROOT}/thirdparty/llvm-patches"\n' + BUILD_LLVM_PROFILE
    + r"""for patch in "${LLVM_PATCH_DIR}"/*.patch; do
  echo "LLVM Patch:     $(basename "$patch") $(sha256sum "$patch" | cut -c1-12)"
done
""")

BUILD_LLVM_START = r"""LLVM_SLEEP="$FIXTURE_LLVM_SLEEP"
[ -n "$LLVM_SLEEP" ] || LLVM_SLEEP=0
PARALLEL_JOBS=1
for arg in "$@"; do
  if [[ "$arg" =~ ^-j([0-9]+)$ ]]; then PARALLEL_JOBS="${BASH_REMATCH[1]}"; fi
done
echo "LLVM Ref:       $LLVM_REF"
echo "jobs: $PARALLEL_JOBS"
if [ -n "$FIXTURE_COUNTER_DIR" ]; then
  echo "$LLVM_REF" >> "$FIXTURE_COUNTER_DIR/llvm.count"
  touch "$FIXTURE_COUNTER_DIR/llvm.started"
fi
if [ -n "$FIXTURE_LLVM_FAIL" ]; then
  echo "FAILED: lib/Fake/broken.cpp.o (fixture LLVM failure)" >&2
  exit 1
fi
mkdir -p "$LLVM_SRC_DIR"
if [ -n "$FIXTURE_LLVM_CLONE" ]; then
  # FlyDSL's script fetches llvm-project here with git, from a URL: the run's URL rewriting must reach it.
  rm -rf "$LLVM_SRC_DIR/src"
  git clone -q "$FIXTURE_LLVM_CLONE" "$LLVM_SRC_DIR/src"
  echo "LLVM source from $FIXTURE_LLVM_CLONE: $(git -C "$LLVM_SRC_DIR/src" log -1 --format=%s)"
fi
"""
BUILD_LLVM_PIP = r"""# FlyDSL's script runs an unguarded pip install here; show which pip and python3 PATH gives us.
echo "pip is $(command -v pip)"
echo "python3 is $(command -v python3)"
if [ -n "$FIXTURE_PIP_INSTALL" ]; then
  # shellcheck disable=SC2086
  pip install $FIXTURE_PIP_INSTALL
  python3 -c "import fixture_tool; print('fixture_tool from', fixture_tool.__file__)"
fi
"""
BUILD_LLVM_PIP_NEXT = r"""# Upstream's newer script installs LLVM's Python dependencies with PYTHON_EXECUTABLE's pip.
echo "PYTHON_EXECUTABLE is $PYTHON_EXECUTABLE"
echo "LLVM python is $("$PYTHON_EXECUTABLE" -c 'import sys; print(sys.executable)')"
if [ -n "$FIXTURE_PIP_INSTALL" ]; then
  # shellcheck disable=SC2086
  "$PYTHON_EXECUTABLE" -m pip install $FIXTURE_PIP_INSTALL
  "$PYTHON_EXECUTABLE" -c "import fixture_tool; print('fixture_tool from', fixture_tool.__file__)"
fi
"""
BUILD_LLVM_END = r"""for i in 1 2 3 4; do
  echo "[$i/4] Building CXX object lib/Fake/part$i.cpp.o"
  [ "$LLVM_SLEEP" = 0 ] || sleep "$LLVM_SLEEP"  # no process for no sleep: most builds of the suite
done
if [ -n "$FIXTURE_LLVM_HOOK" ]; then
  eval "$FIXTURE_LLVM_HOOK"
fi
rm -rf "$LLVM_INSTALL_DIR"
mkdir -p "$LLVM_INSTALL_DIR/lib/cmake/mlir"
echo "$LLVM_REF" > "$LLVM_INSTALL_DIR/llvm-commit.txt"
echo "${LLVM_BUILD_PROFILE}" > "$LLVM_INSTALL_DIR/llvm-profile.txt"
python3 -S -c 'import sys; print(sys.implementation.cache_tag)' > "$LLVM_INSTALL_DIR/python-tag.txt"
echo "LLVM/MLIR build completed successfully!"
"""
BUILD_LLVM_BODY = BUILD_LLVM_START + BUILD_LLVM_PIP + BUILD_LLVM_END
_TAG_LINE = "python3 -S -c 'import sys; print(sys.implementation.cache_tag)' > "
assert _TAG_LINE in BUILD_LLVM_END
BUILD_LLVM_BODY_NEXT = (BUILD_LLVM_START + BUILD_LLVM_PIP_NEXT
                        + BUILD_LLVM_END.replace(_TAG_LINE, '"$PYTHON_EXECUTABLE"' + _TAG_LINE[len("python3"):]))

BUILD_LLVM_SH = BUILD_LLVM_HEAD + BUILD_LLVM_INPUTS + BUILD_LLVM_BODY
BUILD_LLVM_SH_V031 = BUILD_LLVM_HEAD + BUILD_LLVM_INPUTS_V031 + BUILD_LLVM_BODY
BUILD_LLVM_SH_V032 = BUILD_LLVM_HEAD + BUILD_LLVM_INPUTS_V032 + BUILD_LLVM_BODY
BUILD_LLVM_SH_NEXT = BUILD_LLVM_HEAD + BUILD_LLVM_INPUTS_NEXT + BUILD_LLVM_BODY_NEXT

BUILD_SH = r"""#!/bin/bash
# Test fixture standing in for FlyDSL's build.sh (same layout and MLIR discovery; no C++).
set -e
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "${SCRIPT_DIR}/.." && pwd)"
BASE_DIR="$(cd "${REPO_ROOT}/.." && pwd)"
BUILD_DIR="${FLY_BUILD_DIR:-${REPO_ROOT}/build-fly}"
if [[ "${BUILD_DIR}" != /* ]]; then
  BUILD_DIR="${REPO_ROOT}/${BUILD_DIR}"
fi
echo "BUILD_DIR: $BUILD_DIR"
PARALLEL_JOBS=1
for arg in "$@"; do
  if [[ "$arg" =~ ^-j([0-9]+)$ ]]; then PARALLEL_JOBS="${BASH_REMATCH[1]}"; fi
done
if [ -z "${MLIR_PATH:-}" ]; then
  for p in "${BASE_DIR}/llvm-project/mlir_install"; do
    if [ -d "${p}/lib/cmake/mlir" ]; then echo "Auto-detected MLIR_PATH: ${p}"; MLIR_PATH="${p}"; fi
  done
fi
if [ -z "${MLIR_PATH:-}" ]; then
  echo "Error: MLIR_PATH not set and could not be auto-detected." >&2
  exit 1
fi
echo "MLIR_PATH: $MLIR_PATH"
echo "jobs: $PARALLEL_JOBS"
# FlyDSL's sources compile against one LLVM: an MLIR built from another commit fails the build.
WANT=""
if [ -f "$REPO_ROOT/thirdparty/llvm-hash.txt" ]; then
  WANT="$(tr -d '[:space:]' < "$REPO_ROOT/thirdparty/llvm-hash.txt")"
elif [ -f "$REPO_ROOT/thirdparty/llvm-build-info.json" ]; then
  WANT="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['upstream']['llvm_hash'])" \
          "$REPO_ROOT/thirdparty/llvm-build-info.json")"
fi
if [ -n "$WANT" ] && [ -z "$LLVM_REF$LLVM_COMMIT" ] && [ -f "$MLIR_PATH/llvm-commit.txt" ] \
   && [ "$(cat "$MLIR_PATH/llvm-commit.txt")" != "$WANT" ]; then
  echo "error: MLIR at $MLIR_PATH was built from LLVM $(cat "$MLIR_PATH/llvm-commit.txt"), this FlyDSL needs $WANT" >&2
  exit 1
fi
if [ -n "${FIXTURE_COUNTER_DIR:-}" ]; then
  echo "$(git -C "$REPO_ROOT" rev-parse HEAD)" >> "$FIXTURE_COUNTER_DIR/build.count"
  touch "$FIXTURE_COUNTER_DIR/build.started"
fi
if [ -n "${FIXTURE_BUILD_FAIL:-}" ]; then
  echo "FAILED: CMakeFiles/fake.dir/broken.cpp.o (fixture build failure)" >&2
  exit 1
fi
if [ -n "${FIXTURE_CMAKE:-}" ]; then
  GENERATOR="Unix Makefiles"
  if command -v ninja &> /dev/null; then GENERATOR="Ninja"; fi
  echo "Configuring CMake..."
  cmake -G "$GENERATOR" -S "$REPO_ROOT" -B "$BUILD_DIR" -DHIP_PLATFORM=amd
  cmake --build "$BUILD_DIR" -j"$PARALLEL_JOBS"
fi
PKG="$BUILD_DIR/python_packages"
mkdir -p "$PKG"
# Like CMake's CopyFlyPythonSources: the package is staged first, the compiled part comes later, so a
# build killed in between leaves a half-built python_packages/flydsl behind.
rm -rf "$PKG/flydsl"
cp -r "$REPO_ROOT/python/flydsl" "$PKG/flydsl"
if [ -n "${FIXTURE_STAGED_HOOK:-}" ]; then
  eval "$FIXTURE_STAGED_HOOK"
fi
SLEEPS=(${FIXTURE_BUILD_SLEEP:-0})  # one for every step, or one per step
for i in 1 2 3; do
  echo "[$i/3] Building CXX object python/mlir_flydsl/part$i.cpp.o"
  SLEEP="${SLEEPS[$((i - 1))]:-${SLEEPS[0]}}"
  [ "$SLEEP" = 0 ] || sleep "$SLEEP"
done
if [ -n "${FIXTURE_NEEDS_PATCHELF:-}" ]; then
  # FlyDSL's CopyFlyPythonSources: `bash -c "patchelf --set-rpath ..."` after all the C++ has compiled.
  if ! command -v patchelf > /dev/null; then
    echo "bash: line 1: patchelf: command not found" >&2
    echo "FAILED: python/mlir_flydsl/CMakeFiles/CopyFlyPythonSources" >&2
    exit 127
  fi
  patchelf --version
fi
if [ -z "${FIXTURE_BUILD_NO_MLIR:-}" ]; then
  TAG="$(python3 -S -c 'import sys; print(sys.implementation.cache_tag)')"
  mkdir -p "$PKG/flydsl/_mlir/_mlir_libs"
  : > "$PKG/flydsl/_mlir/__init__.py"
  : > "$PKG/flydsl/_mlir/_mlir_libs/__init__.py"
  # Stands in for _mlir.cpython-3XY-*.so: refuses another interpreter, as a compiled extension would.
  cat > "$PKG/flydsl/_mlir/_mlir_libs/_mlir.py" <<EOF
import sys
if sys.implementation.cache_tag != "$TAG":
    raise ImportError("flydsl._mlir was built for $TAG, not for " + sys.implementation.cache_tag)
BUILT_FOR = "$TAG"
import os as _os
if _os.environ.get("FIXTURE_COUNTER_DIR"):  # each import of the built tree (a probe's) counted
    with open(_os.path.join(_os.environ["FIXTURE_COUNTER_DIR"], "import.count"), "a") as _count:
        _count.write(BUILT_FOR + "\n")
EOF
fi
if [ -n "${FIXTURE_BUILD_HOOK:-}" ]; then
  eval "$FIXTURE_BUILD_HOOK"
fi
echo "Build complete!"
"""
_BUILD_TAG = "TAG=\"$(python3 -S -c 'import sys; print(sys.implementation.cache_tag)')\""
assert _BUILD_TAG in BUILD_SH
# "next": build.sh builds for the interpreter PYTHON_EXECUTABLE names (python3 from PATH by default).
_BUILD_PYTHON = ('PYTHON_EXECUTABLE="${PYTHON_EXECUTABLE:-python3}"\n'
                 'echo "build python is $("$PYTHON_EXECUTABLE" -c \'import sys; print(sys.executable)\')"\n')
BUILD_SH_NEXT = BUILD_SH.replace('echo "BUILD_DIR: $BUILD_DIR"\n', 'echo "BUILD_DIR: $BUILD_DIR"\n' + _BUILD_PYTHON
                                 ).replace(_BUILD_TAG, _BUILD_TAG.replace("$(python3", '$("$PYTHON_EXECUTABLE"'))

FLYDSL_INIT = '''"""Fixture stand-in for FlyDSL."""
__version__ = "{version}"
'''

KERNEL = '''"""Fixture stand-in for kernels/moe_gemm_2stage.py: needs what only a build (or the release wheel) makes."""
import flydsl._mlir._mlir_libs._mlir  # noqa: F401  (the compiled MLIR bindings)
'''


def git(cwd: str, *args: str) -> str:
    env = dict(os.environ)
    env.update(GIT_ENV)
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", *args], cwd=cwd, env=env, check=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    ).stdout.decode().strip()


def write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)
    os.chmod(path, mode)


LLVM_PATCH = "thirdparty/llvm-rocdl-lld-argv0.patch"
PATCH_TEXT = "--- a/lld/tools/lld/lld.cpp\n+++ b/lld/tools/lld/lld.cpp\n@@ fixture @@\n-argv0\n+argv[0]\n"
LLVM_PATCHES = "thirdparty/llvm-patches"  # "next": build_llvm.sh applies every patch in this folder
NEXT_PATCHES = {f"{LLVM_PATCHES}/0001-rocdl-lld-argv0.patch": PATCH_TEXT,
                f"{LLVM_PATCHES}/0002-fixture-mlir-python.patch": "--- a/mlir/x\n+++ b/mlir/x\n@@ fixture @@\n"}

# Upstream's shapes (tags of ROCm/FlyDSL); the default is v0.2.2's, which every other test relies on.
#   v0.2.2  thirdparty/llvm-hash.txt, kernels/moe_gemm_2stage.py (flat kernels)
#   v0.2.3  kernels/moe/moe_gemm_2stage.py (kernels in subpackages)
#   v0.3.0  kernels/moe/moe_gemm_2stage/__init__.py (the module became a package)
#   v0.3.1  thirdparty/llvm-build-info.json ({"upstream": {"llvm_hash": ...}}, read by BUILD_LLVM_SH_V031 with
#           upstream's ${LLVM_REF:-${LLVM_COMMIT:-...}}); no moe_gemm_2stage at all
#   v0.3.2  v0.3.0's kernels, llvm-build-info.json, an LLVM patch and LLVM_BUILD_PROFILE (BUILD_LLVM_SH_V032)
#   next    upstream after the snapshot the real-repository tests use (2026-08-22; no tag of it here): v0.3.2's,
#           with the patches in a folder (thirdparty/llvm-patches/, NEXT_PATCHES), and both scripts building for
#           the interpreter PYTHON_EXECUTABLE names (python3 from PATH by default); build_llvm.sh's pip install
#           is "$PYTHON_EXECUTABLE" -m pip install (BUILD_LLVM_SH_NEXT, BUILD_SH_NEXT).  Every layout's
#           build.sh builds into FLY_BUILD_DIR when it is set, as FlyDSL's has since v0.1.
LAYOUTS = ("v0.2.2", "v0.2.3", "v0.3.0", "v0.3.1", "v0.3.2", "next")
_LAYOUT_PATHS = ("kernels/moe_gemm_2stage.py", "kernels/moe", "kernels/norm", "thirdparty/llvm-hash.txt",
                 "thirdparty/llvm-build-info.json", LLVM_PATCH, LLVM_PATCHES)


def build_info(llvm_hash: str) -> str:
    return ('{\n  "upstream": {\n    "repository": "https://github.com/llvm/llvm-project.git",\n'
            f'    "llvm_hash": "{llvm_hash}"\n  }}\n}}\n')


def write_tree(repo: str, version: str, llvm_hash: str, layout: str = "v0.2.2") -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")
    for rel in _LAYOUT_PATHS:  # what another layout's commit left
        path = os.path.join(repo, rel)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.remove(path)
    write(os.path.join(repo, "python", "flydsl", "__init__.py"), FLYDSL_INIT.format(version=version))
    write(os.path.join(repo, "kernels", "__init__.py"), "")
    if layout == "v0.2.2":
        write(os.path.join(repo, "kernels", "moe_gemm_2stage.py"), KERNEL)
    else:
        write(os.path.join(repo, "kernels", "moe", "__init__.py"), "")
        write(os.path.join(repo, "kernels", "norm", "__init__.py"), "")
        write(os.path.join(repo, "kernels", "norm", "rmsnorm_kernel.py"), KERNEL)
    if layout == "v0.2.3":
        write(os.path.join(repo, "kernels", "moe", "moe_gemm_2stage.py"), KERNEL)
    elif layout in ("v0.3.0", "v0.3.2", "next"):
        write(os.path.join(repo, "kernels", "moe", "moe_gemm_2stage", "__init__.py"), KERNEL)
    if layout in ("v0.3.1", "v0.3.2", "next"):
        write(os.path.join(repo, "thirdparty", "llvm-build-info.json"), build_info(llvm_hash))
    else:
        write(os.path.join(repo, "thirdparty", "llvm-hash.txt"), llvm_hash + "\n")
    if layout == "v0.3.2":
        write(os.path.join(repo, LLVM_PATCH), PATCH_TEXT)
    if layout == "next":
        for rel, text in NEXT_PATCHES.items():
            write(os.path.join(repo, rel), text)
    script = {"v0.3.1": BUILD_LLVM_SH_V031, "v0.3.2": BUILD_LLVM_SH_V032, "next": BUILD_LLVM_SH_NEXT}.get(
        layout, BUILD_LLVM_SH)
    write(os.path.join(repo, "scripts", "build_llvm.sh"), script, 0o755)
    write(os.path.join(repo, "scripts", "build.sh"), BUILD_SH_NEXT if layout == "next" else BUILD_SH, 0o755)
    write(os.path.join(repo, ".gitignore"), "build-fly/\n__pycache__/\n")


class FixtureRepo:
    """A FlyDSL-shaped repository with a few commits and tags; ``commits`` maps a label to a hash."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.commits: Dict[str, str] = {}

    @property
    def url(self) -> str:
        return "file://" + self.path

    def commit(self, label: str, version: str, llvm_hash: str = LLVM_HASH_A, tag: Optional[str] = None,
               files: Optional[Dict[str, str]] = None, layout: str = "v0.2.2") -> str:
        """The fixture tree in ``layout`` (LAYOUTS), with ``files`` (path relative to the repository: text)
        written over it."""
        write_tree(self.path, version, llvm_hash, layout)
        for rel, text in (files or {}).items():
            write(os.path.join(self.path, rel), text)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", f"{label}: version {version}")
        sha = git(self.path, "rev-parse", "HEAD")
        if tag:
            git(self.path, "tag", tag)
        self.commits[label] = sha
        return sha


def make_repo(path: str) -> FixtureRepo:
    """v0.2.2 (tag), dev (0.2.2 base version at a later commit, like the pin), v0.2.3 (tag), and
    llvm-b (0.2.3 with another LLVM commit)."""
    os.makedirs(path)
    git(path, "init", "-q", "-b", "main")
    repo = FixtureRepo(path)
    repo.commit("v0.2.2", "0.2.2", tag="v0.2.2")
    repo.commit("dev", "0.2.2")
    repo.commit("v0.2.3", "0.2.3", tag="v0.2.3")
    repo.commit("llvm-b", "0.2.3", llvm_hash=LLVM_HASH_B)
    return repo


def add_submodule(repo: FixtureRepo, sub_path: str, label: str) -> str:
    """Add a submodule (thirdparty/dlpack) pointing at ``sub_path`` and commit it under ``label``."""
    if not os.path.isdir(sub_path):
        os.makedirs(sub_path)
        git(sub_path, "init", "-q", "-b", "main")
        write(os.path.join(sub_path, "include", "dlpack", "dlpack.h"), "/* fixture */\n")
        git(sub_path, "add", "-A")
        git(sub_path, "commit", "-q", "-m", "dlpack fixture")
    git(repo.path, "submodule", "add", "-q", sub_path, "thirdparty/dlpack")
    git(repo.path, "commit", "-q", "-m", f"{label}: add submodule")
    sha = git(repo.path, "rev-parse", "HEAD")
    repo.commits[label] = sha
    return sha


def make_installed_tree(path: str, version: str, python: str = sys.executable) -> str:
    """An installed FlyDSL tree (flydsl + kernels side by side, as a pip install or checkout would have)
    built for ``python``; returns ``path`` (the folder to put on PYTHONPATH)."""
    tag = subprocess.run(
        [python, "-c", "import sys; print(sys.implementation.cache_tag)"], check=True, stdout=subprocess.PIPE
    ).stdout.decode().strip()
    write(os.path.join(path, "flydsl", "__init__.py"), FLYDSL_INIT.format(version=version))
    write(os.path.join(path, "flydsl", "_mlir", "__init__.py"), "")
    write(os.path.join(path, "flydsl", "_mlir", "_mlir_libs", "__init__.py"), "")
    write(
        os.path.join(path, "flydsl", "_mlir", "_mlir_libs", "_mlir.py"),
        f'import sys\nassert sys.implementation.cache_tag == "{tag}"\nBUILT_FOR = "{tag}"\n',
    )
    write(os.path.join(path, "kernels", "__init__.py"), "")
    write(os.path.join(path, "kernels", "moe_gemm_2stage.py"), KERNEL)
    return path


def make_split_trees(folder: str, version: str = "0.2.5") -> str:
    """flydsl in one folder and kernels in another (two installs that happen to sit on one path): each
    imports, but not from one tree.  Returns the PYTHONPATH that puts both on the path."""
    a = make_installed_tree(os.path.join(folder, "a"), version)
    b = make_installed_tree(os.path.join(folder, "b"), version)
    os.rename(os.path.join(a, "kernels"), os.path.join(a, "kernels-gone"))
    os.rename(os.path.join(b, "flydsl"), os.path.join(b, "flydsl-gone"))
    return f"{a}:{b}"


def make_tool_wheel(folder: str, name: str = "fixture-tool", version: str = "1.0") -> str:
    """A tiny wheel (fixture_tool 1.0; or ``name`` at ``version``, one module of that name), written by hand so
    no build backend or network is needed, for the build's `pip install`; returns the folder holding it."""
    import zipfile

    wheels = os.path.join(folder, "wheels")
    os.makedirs(wheels, exist_ok=True)
    module = name.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        # cmake_dir: what nanobind has and ensure-flydsl asks of a nanobind the interpreter imports
        f"{module}.py": f"VALUE = 42\n__version__ = {version!r}\n\n\ndef cmake_dir():\n    return __file__\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(os.path.join(wheels, f"{module}-{version}-py3-none-any.whl"), "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", record)
    return wheels


def counts(counter_dir: str, name: str) -> List[str]:
    try:
        with open(os.path.join(counter_dir, name + ".count")) as handle:
            return [line.strip() for line in handle if line.strip()]
    except FileNotFoundError:
        return []


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()
