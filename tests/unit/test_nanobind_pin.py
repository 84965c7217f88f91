"""The nanobind a build may use (source/needs.py, ways/source/tools.py): nanobind 3 breaks MLIR's
configure, so ``>=2.9,<3`` unless the pin's own files say otherwise, bound by bound."""

from __future__ import annotations

from typing import Dict, Sequence

import pytest

from ensure_flydsl.source.needs import (
    KNOWN_FLYDSL_NEEDS,
    build_tools,
    nanobind_requirement,
    nanobind_specifiers,
    needs_from_files,
)
from ensure_flydsl.ways.source.tools import accepts, needed, newest, package_spec


def test_the_default_is_nanobind_at_least_2_9_below_3() -> None:
    """Before: a pin that names no nanobind requirement got a bare `nanobind` (3.x from the index)."""
    needs = needs_from_files({"CMakeLists.txt": "find_package(nanobind CONFIG REQUIRED)\n"}, "test")
    assert needs.nanobind and needs.nanobind_spec == ">=2.9,<3"
    assert package_spec("nanobind", build_tools(needs, llvm=False)["nanobind"]) == "nanobind>=2.9,<3"
    assert "nanobind >=2.9,<3" in needs.summary()
    assert KNOWN_FLYDSL_NEEDS.nanobind_spec == ">=2.0,<3"  # every FlyDSL tag's pyproject says >=2.0


@pytest.mark.parametrize("files,expected", [
    ({"pyproject.toml": 'requires = ["setuptools>=64", "nanobind>=2.0", "cmake"]\n'}, ">=2.0,<3"),
    ({"pyproject.toml": "requires = ['nanobind >= 2.4, < 2.12 ; python_version >= \"3.9\"']\n"}, ">=2.4,<2.12"),
    ({"requirements.txt": "numpy\nnanobind==2.9.2  # tested with\n"}, "==2.9.2"),
    ({"python/requirements-build.txt": "NanoBind~=2.9\n"}, "~=2.9"),
    ({"docs/requirements.txt": "nanobind<2\n"}, ">=2.9,<3"),  # the docs' requirements are not the build's
    ({"CMakeLists.txt": "find_package(nanobind 2.10 CONFIG REQUIRED)\n"}, ">=2.10,<3"),
    ({"cmake/x.cmake": "find_package(nanobind 2.9.2 EXACT CONFIG)\n# find_package(nanobind 4.0)\n"}, "==2.9.2"),
    ({"scripts/build_llvm.sh": "pip install 'nanobind<2.12' numpy pybind11\n"}, ">=2.9,<2.12"),
    ({"scripts/build_llvm.sh": '"$PYTHON_EXECUTABLE" -m pip install "nanobind>=2.10,<2.12" numpy\n'},
     ">=2.10,<2.12"),
    ({"scripts/build_llvm.sh": "# pip install 'nanobind>=4'\npip install nanobind numpy pybind11\n"}, ">=2.9,<3"),
    ({"pyproject.toml": '"nanobind>=2.0"', "scripts/build_llvm.sh": "pip install 'nanobind<2.12'\n"}, ">=2.0,<2.12"),
])
def test_what_the_pin_says_about_nanobind(files: Dict[str, str], expected: str) -> None:
    bindings = {"python/mlir_flydsl/CMakeLists.txt": "PYTHON_BINDINGS_LIBRARY nanobind\n"}
    needs = needs_from_files({**bindings, **files}, "test")
    assert needs.nanobind_spec == expected
    assert all(name.isidentifier() for name in needs.llvm_pip)  # the packages' names, without specifiers


def test_the_specifiers_are_gathered_in_order_without_repeats() -> None:
    files = {"pyproject.toml": '"nanobind>=2.0"', "requirements.txt": "nanobind >=2.0,!=2.5\n"}
    assert nanobind_specifiers(files, {"CMakeLists.txt": "find_package(nanobind 2.4)"}, ["'nanobind<3'", "numpy"]) == (
        ">=2.0", "!=2.5", ">=2.4", "<3")


@pytest.mark.parametrize("pin,expected", [
    ((), ">=2.9,<3"),
    ([">=2.0"], ">=2.0,<3"),  # the pin's own lower bound, the default's upper one
    (["<2.12"], ">=2.9,<2.12"),
    (["==2.9.2"], "==2.9.2"),
    (["~=2.9"], "~=2.9"),
    ([">=3.0"], ">=3.0"),  # the pin asks for nanobind 3: the default's <3 would contradict it
    (["<2.5"], "<2.5"),  # and a pin below 2.9 drops the default's floor
    (["!=2.9.1"], ">=2.9,!=2.9.1,<3"),
])
def test_the_default_bounds_fill_in_what_the_pin_does_not_say(pin: Sequence[str], expected: str) -> None:
    assert nanobind_requirement(pin) == expected


def test_a_version_is_judged_by_the_requirement_and_the_index_by_what_pip_would_take() -> None:
    spec = ">=2.9,<3"
    assert accepts("2.9.0", spec) and accepts("2.12.1", spec)
    assert not accepts("3.0.0", spec) and not accepts("2.8.1", spec) and not accepts(None, spec)
    assert accepts("3.31.0rc1", ">=3.31")  # a release candidate counts as its release, as before
    assert accepts("1.0", None) and not accepts("x", spec)
    assert needed(">=3.20") == "at least 3.20 is needed"
    assert needed(spec) == "a version >=2.9,<3 is needed"
    assert newest("nanobind", ["3.0.1", "2.9.2", "2.10.0rc1", "junk", "2.8.0"], spec) == "2.9.2"
    assert newest("cmake", ["4.1.0", "3.31.6", "3.10.0"], ">=3.20") == "3.31.6"  # a provided cmake stays on 3
    assert newest("nanobind", ["3.0.1"], spec) is None
