"""Things a build needs, made by the tests: a fake ROCm tree, a fake MLIR install, build files for a
FlyDSL-shaped repository, and a fingerprint of a whole folder tree (no ROCm or FlyDSL code in here).

The fake ROCm is shaped like a ROCm 7 image whose hip CMake package names a library that is not there:
``lib/cmake/hip/hip-targets-release.cmake`` sets ``IMPORTED_LOCATION_RELEASE`` to
``${_IMPORT_PREFIX}/lib/libamdhip64.so.7.2.70201`` while the runtime installed is a real shared library
``lib/libamdhip64.so.7.2.53211`` (compiled here with the C compiler).  The CMake files follow the
conventions of CMake's own export files: ``hip-targets.cmake`` computes ``_IMPORT_PREFIX`` four levels up
from its own location, includes ``hip-targets-*.cmake``, and at the end checks
``_cmake_import_check_files_for_<target>``, failing with "The imported target ... references the file ...
but this file does not exist"; ``hip-config.cmake`` derives its prefix from its location (through
REALPATH when it is reached by a symbolic link) and pulls in dependencies (amd_comgr, hsa-runtime64) with
``find_dependency``.  So a real ``cmake`` configure of a project doing ``find_package(hip REQUIRED CONFIG)``
fails against it exactly as on the broken images.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from typing import Dict, Optional, Tuple

from tests.helpers.flydsl_fixture import FixtureRepo, git, write

RUNTIME_VERSION = "7.2.53211"  # the libamdhip64 the fake image has
NAMED_VERSION = "7.2.70201"  # the one its hip CMake package names

_HIP_CONFIG = r"""# hip CMake package of a fake ROCm image (test fixture)
get_filename_component(PACKAGE_PREFIX_DIR "${CMAKE_CURRENT_LIST_DIR}/../../../" ABSOLUTE)
macro(set_and_check _var _file)
  set(${_var} "${_file}")
  if(NOT EXISTS "${_file}")
    message(FATAL_ERROR "File or directory ${_file} referenced by variable ${_var} does not exist !")
  endif()
endmacro()
include(CMakeFindDependencyMacro)
# Reached through a symbolic link (an old layout): take the prefix from the real location.
if(IS_SYMLINK "${CMAKE_CURRENT_LIST_FILE}")
  get_filename_component(_hip_real_file "${CMAKE_CURRENT_LIST_FILE}" REALPATH)
  get_filename_component(PACKAGE_PREFIX_DIR "${_hip_real_file}/../../../../" ABSOLUTE)
endif()
set(HIP_PACKAGE_PREFIX_DIR "${PACKAGE_PREFIX_DIR}")
set_and_check(hip_INCLUDE_DIR "${PACKAGE_PREFIX_DIR}/include")
set_and_check(hip_LIB_INSTALL_DIR "${PACKAGE_PREFIX_DIR}/lib")
set_and_check(hip_BIN_INSTALL_DIR "${PACKAGE_PREFIX_DIR}/bin")
set_and_check(hip_HIPCC_EXECUTABLE "${hip_BIN_INSTALL_DIR}/hipcc")
set_and_check(hip_HIPCONFIG_EXECUTABLE "${hip_BIN_INSTALL_DIR}/hipconfig")
if(NOT DEFINED HIP_PLATFORM)
  if(DEFINED ENV{HIP_PLATFORM})
    set(HIP_PLATFORM "$ENV{HIP_PLATFORM}")
  else()
    execute_process(COMMAND "${hip_HIPCONFIG_EXECUTABLE}" --platform
                    OUTPUT_VARIABLE HIP_PLATFORM OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
endif()
if(HIP_PLATFORM STREQUAL "amd")
  include("${hip_LIB_INSTALL_DIR}/cmake/hip/hip-config-amd.cmake")
else()
  message(FATAL_ERROR "Unexpected HIP_PLATFORM: ${HIP_PLATFORM}")
endif()
set(hip_LIBRARIES hip::host hip::device)
set(hip_INCLUDE_DIRS "${hip_INCLUDE_DIR}")
"""

_HIP_CONFIG_AMD = r"""# AMD platform part of the fake hip package (test fixture)
if(DEFINED ENV{ROCM_PATH})
  set(ROCM_PATH "$ENV{ROCM_PATH}")
endif()
if(NOT DEFINED ROCM_PATH)
  set(ROCM_PATH "${PACKAGE_PREFIX_DIR}")
endif()
find_dependency(amd_comgr)
include("${CMAKE_CURRENT_LIST_DIR}/hip-targets.cmake")
find_dependency(hsa-runtime64)
set_target_properties(hip::amdhip64 PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${HIP_PACKAGE_PREFIX_DIR}/include")
set_target_properties(hip::host PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "__HIP_PLATFORM_AMD__=1")
"""

_VERSION_FILE = r"""set(PACKAGE_VERSION "{version}")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
"""

# The shape of CMake's install(EXPORT) files: prefix from the file's own location, per-configuration
# files globbed in, then the check that every referenced file exists.
_TARGETS = r"""# Targets file in the shape CMake's install(EXPORT) writes (test fixture)
cmake_policy(PUSH)
cmake_policy(VERSION 3.0...3.28)
set(CMAKE_IMPORT_FILE_VERSION 1)
set(_cmake_targets_defined "")
foreach(_cmake_expected_target IN ITEMS {targets})
  if(TARGET "${{_cmake_expected_target}}")
    list(APPEND _cmake_targets_defined "${{_cmake_expected_target}}")
  endif()
endforeach()
if(_cmake_targets_defined)
  unset(_cmake_targets_defined)
  set(CMAKE_IMPORT_FILE_VERSION)
  cmake_policy(POP)
  return()
endif()
get_filename_component(_IMPORT_PREFIX "${{CMAKE_CURRENT_LIST_FILE}}" PATH)
get_filename_component(_IMPORT_PREFIX "${{_IMPORT_PREFIX}}" PATH)
get_filename_component(_IMPORT_PREFIX "${{_IMPORT_PREFIX}}" PATH)
get_filename_component(_IMPORT_PREFIX "${{_IMPORT_PREFIX}}" PATH)
if(_IMPORT_PREFIX STREQUAL "/")
  set(_IMPORT_PREFIX "")
endif()
{declarations}
file(GLOB _cmake_config_files "${{CMAKE_CURRENT_LIST_DIR}}/{stem}-*.cmake")
foreach(_cmake_config_file IN LISTS _cmake_config_files)
  include("${{_cmake_config_file}}")
endforeach()
unset(_cmake_config_file)
unset(_cmake_config_files)
set(_IMPORT_PREFIX)
foreach(_cmake_target IN LISTS _cmake_import_check_targets)
  foreach(_cmake_file IN LISTS "_cmake_import_check_files_for_${{_cmake_target}}")
    if(NOT EXISTS "${{_cmake_file}}")
      message(FATAL_ERROR "The imported target \"${{_cmake_target}}\" references the file
   \"${{_cmake_file}}\"
but this file does not exist.  Possible reasons include:
* The file was deleted, renamed, or moved to another location.
* An install or uninstall procedure did not complete successfully.
* The installation package was faulty and contained
   \"${{CMAKE_CURRENT_LIST_FILE}}\"
but not all the files it references.
")
    endif()
  endforeach()
  unset(_cmake_file)
  unset("_cmake_import_check_files_for_${{_cmake_target}}")
endforeach()
unset(_cmake_target)
unset(_cmake_import_check_targets)
set(CMAKE_IMPORT_FILE_VERSION)
cmake_policy(POP)
"""

_TARGETS_RELEASE = r"""# Per-configuration targets file (test fixture)
set(CMAKE_IMPORT_FILE_VERSION 1)
set_property(TARGET {target} APPEND PROPERTY IMPORTED_CONFIGURATIONS RELEASE)
set_target_properties({target} PROPERTIES
  IMPORTED_LOCATION_RELEASE "${{_IMPORT_PREFIX}}/lib/{library}"
  IMPORTED_SONAME_RELEASE "{soname}"
  )
list(APPEND _cmake_import_check_targets {target} )
list(APPEND _cmake_import_check_files_for_{target} "${{_IMPORT_PREFIX}}/lib/{library}" )
set(CMAKE_IMPORT_FILE_VERSION)
"""

_HIP_DECLARATIONS = """add_library(hip::amdhip64 SHARED IMPORTED)
add_library(hip::host INTERFACE IMPORTED)
set_target_properties(hip::host PROPERTIES INTERFACE_LINK_LIBRARIES "hip::amdhip64")
add_library(hip::device INTERFACE IMPORTED)
set_target_properties(hip::device PROPERTIES INTERFACE_LINK_LIBRARIES "hip::host")"""

_HSA_CONFIG = r"""# hsa-runtime64 package of the fake ROCm image (test fixture)
include("${CMAKE_CURRENT_LIST_DIR}/hsa-runtime64Targets.cmake")
"""

_COMGR_CONFIG = r"""# amd_comgr package of the fake ROCm image (test fixture)
if(NOT TARGET amd_comgr)
  add_library(amd_comgr INTERFACE IMPORTED)
endif()
"""

_HIP_HEADER = """#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int hipGetDeviceCount(int* count);
#ifdef __cplusplus
}
#endif
"""

_HIP_SOURCE = '#include "hip/hip_runtime_api.h"\nint hipGetDeviceCount(int* count) { *count = 0; return 0; }\n'
_HSA_SOURCE = "int hsa_init(void) { return 0; }\n"


def _compile_shared(source: str, output: str, soname: str) -> None:
    folder = os.path.dirname(output)
    src = output + ".c"
    with open(src, "w") as handle:
        handle.write(source)
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "gcc"
    subprocess.run([cc, "-shared", "-fPIC", "-I", os.path.join(folder, "..", "include"),
                    f"-Wl,-soname,{soname}", "-o", output, src], check=True)
    os.unlink(src)


def make_fake_rocm(prefix: str, *, named: str = NAMED_VERSION, runtime: Optional[str] = RUNTIME_VERSION,
                   with_hip_package: bool = True) -> str:
    """A fake ROCm image at ``prefix``: real libamdhip64.so.<runtime> (None: no runtime at all), and a hip
    CMake package naming libamdhip64.so.<named>.  Returns ``prefix``."""
    lib = os.path.join(prefix, "lib")
    os.makedirs(lib)
    write(os.path.join(prefix, ".info", "version"), "7.2.0\n")
    write(os.path.join(prefix, "include", "hip", "hip_runtime_api.h"), _HIP_HEADER)
    write(os.path.join(prefix, "bin", "hipconfig"), '#!/bin/sh\n[ "$1" = --platform ] && echo amd\n', 0o755)
    write(os.path.join(prefix, "bin", "hipcc"), "#!/bin/sh\nexit 1\n", 0o755)
    # ROCm's own LLVM, with its CMake package (which must never be taken for the pin's LLVM).
    write(os.path.join(prefix, "llvm", "lib", "cmake", "llvm", "LLVMConfig.cmake"), "# ROCm's LLVM (fixture)\n")
    if runtime is not None:
        _compile_shared(_HIP_SOURCE, os.path.join(lib, f"libamdhip64.so.{runtime}"), "libamdhip64.so.7")
        os.symlink(f"libamdhip64.so.{runtime}", os.path.join(lib, "libamdhip64.so.7"))
        os.symlink("libamdhip64.so.7", os.path.join(lib, "libamdhip64.so"))
    _compile_shared(_HSA_SOURCE, os.path.join(lib, "libhsa-runtime64.so.1.18.0"), "libhsa-runtime64.so.1")
    os.symlink("libhsa-runtime64.so.1.18.0", os.path.join(lib, "libhsa-runtime64.so.1"))
    cmake = os.path.join(lib, "cmake")
    hsa = os.path.join(cmake, "hsa-runtime64")
    write(os.path.join(hsa, "hsa-runtime64-config.cmake"), _HSA_CONFIG)
    write(os.path.join(hsa, "hsa-runtime64Targets.cmake"), _TARGETS.format(
        targets="hsa-runtime64::hsa-runtime64", stem="hsa-runtime64Targets",
        declarations="add_library(hsa-runtime64::hsa-runtime64 SHARED IMPORTED)"))
    write(os.path.join(hsa, "hsa-runtime64Targets-release.cmake"), _TARGETS_RELEASE.format(
        target="hsa-runtime64::hsa-runtime64", library="libhsa-runtime64.so.1.18.0",
        soname="libhsa-runtime64.so.1"))
    write(os.path.join(cmake, "amd_comgr", "amd_comgr-config.cmake"), _COMGR_CONFIG)
    if with_hip_package:
        hip = os.path.join(cmake, "hip")
        write(os.path.join(hip, "hip-config.cmake"), _HIP_CONFIG)
        write(os.path.join(hip, "hip-config-amd.cmake"), _HIP_CONFIG_AMD)
        write(os.path.join(hip, "hip-config-version.cmake"), _VERSION_FILE.format(version=RUNTIME_VERSION))
        write(os.path.join(hip, "hip-targets.cmake"), _TARGETS.format(
            targets="hip::amdhip64 hip::host hip::device", stem="hip-targets", declarations=_HIP_DECLARATIONS))
        write(os.path.join(hip, "hip-targets-release.cmake"), _TARGETS_RELEASE.format(
            target="hip::amdhip64", library=f"libamdhip64.so.{named}", soname="libamdhip64.so.7"))
    return prefix


HIP_USER_CMAKE = """cmake_minimum_required(VERSION 3.20)
project(HipUser LANGUAGES C CXX)
set(CMAKE_CXX_STANDARD 17)
find_package(hip REQUIRED CONFIG)
add_library(hipuser SHARED user.cpp)
target_link_libraries(hipuser PRIVATE hip::host hip::amdhip64)
"""

HIP_USER_SOURCE = """#include <hip/hip_runtime_api.h>
extern "C" int devices() { int n = -1; hipGetDeviceCount(&n); return n; }
"""


def make_hip_user_project(folder: str) -> str:
    """A tiny CMake project that needs the hip package and links libamdhip64 (FlyJitRuntime's shape)."""
    write(os.path.join(folder, "CMakeLists.txt"), HIP_USER_CMAKE)
    write(os.path.join(folder, "user.cpp"), HIP_USER_SOURCE)
    return folder


def make_fake_mlir(prefix: str) -> str:
    """An MLIR install prefix as far as MLIR_PATH checks go (lib/cmake/mlir with a config file)."""
    write(os.path.join(prefix, "lib", "cmake", "mlir", "MLIRConfig.cmake"), "# fake MLIR (test fixture)\n")
    write(os.path.join(prefix, "lib", "cmake", "llvm", "LLVMConfig.cmake"), "# fake LLVM (test fixture)\n")
    return prefix


def tree_fingerprint(top: str) -> Dict[str, Tuple[str, ...]]:
    """Every entry under ``top``: kind, mode, and the content's hash (a file) or the target (a link)."""
    found: Dict[str, Tuple[str, ...]] = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, top)
            st = os.lstat(path)
            if os.path.islink(path):
                found[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                found[rel] = ("dir", oct(st.st_mode), str(st.st_mtime_ns))
            else:
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                found[rel] = ("file", oct(st.st_mode), digest, str(st.st_mtime_ns))
    return found


def commit_build_files(repo: FixtureRepo, label: str, files: Dict[str, str]) -> str:
    """Add build files (CMakeLists.txt, cmake/*.cmake ...) on top of the repository's head; commit them."""
    for rel, text in files.items():
        write(os.path.join(repo.path, rel), text)
    git(repo.path, "add", "-A")
    git(repo.path, "commit", "-q", "-m", f"{label}: build files")
    sha = git(repo.path, "rev-parse", "HEAD")
    repo.commits[label] = sha
    return sha


def cmake_lists(*, hip: bool = False, patchelf: bool = False, nanobind: bool = False,
                minimum: str = "3.20") -> str:
    """A top-level CMakeLists.txt in FlyDSL's shape, naming only the needs asked for."""
    lines = [f"cmake_minimum_required(VERSION {minimum})", "project(FixtureFly LANGUAGES C CXX)",
             "set(CMAKE_CXX_STANDARD 17)"]
    if hip:
        lines.append("find_package(hip REQUIRED CONFIG)")
    if nanobind:
        lines.append("find_package(nanobind CONFIG REQUIRED)")
    if patchelf:
        lines.append("add_custom_target(SetRpath ALL COMMAND patchelf --version)")
    return "\n".join(lines) + "\n"
