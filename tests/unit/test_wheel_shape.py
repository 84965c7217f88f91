"""The shape of a FlyDSL wheel (issue 19, item 1) as a pure rule: a small wheel made here, with the real wheel's
layout in miniature (the package, its generated ``_mlir``, ``flydsl.libs``, the dist-info) and one extra file
added, is compared with the checkout's sources by ``check_provenance``: its sources are all byte-identical, yet
the extra file is refused, named with its reason, and the wheel is not proven.  The run around it (exit 8, the
marker, nothing installed, ``auto`` building from source) is tests/scenarios/test_wheel_shape.py, once, on the
real wheel."""

from __future__ import annotations

import os
import sys
from typing import Dict

import pytest

from ensure_flydsl.ways.release.wheels import check_provenance
from tests.helpers.small_wheel import make_sources, make_wheel

EXT = "cpython-%d%d-x86_64-linux-gnu.so" % sys.version_info[:2]
RUN = b"import os; open(os.environ.get('FIXTURE_COUNTER_DIR', '/tmp') + '/wheel-code-ran', 'w')\n"

# The pin's python/flydsl (the tracked files), and what a real wheel adds to them.
SOURCES: Dict[str, bytes] = {
    "__init__.py": b"__version__ = '0.2.2'\n",
    "compiler/__init__.py": b"",
    "compiler/jit_argument.py": b"ARGUMENT = 1\n",
    "expr/__init__.py": b"",
    "expr/arith.py": b"def add(a, b):\n    return a + b\n",
}
WHEEL_ONLY: Dict[str, bytes] = {
    f"flydsl/_mlir/_mlir_libs/_mlir.{EXT}": b"\x7fELF",
    "flydsl/_mlir/__init__.py": b"",
    "flydsl.libs/libFlyPythonCAPI.so.23.0git": b"\x7fELF",
    "flydsl-0.2.2.dist-info/METADATA": b"Name: flydsl\nVersion: 0.2.2\n",
    "flydsl-0.2.2.dist-info/WHEEL": b"Root-Is-Purelib: false\n",
    "flydsl-0.2.2.dist-info/RECORD": b"",
}

# Each kind of extra file, and the reason the refusal gives for it.
EXTRA: Dict[str, str] = {
    "flydsl/compiler/jit_argument/__init__.py":
        "a package that shadows the tracked module flydsl/compiler/jit_argument.py",
    f"flydsl/compiler/jit_argument.{EXT}":
        "an extension module that shadows the tracked module flydsl/compiler/jit_argument.py",
    "flydsl/expr/arith.abi3.so": "an extension module that shadows the tracked module flydsl/expr/arith.py",
    "flydsl/expr/arith.pyd": "an extension module that shadows the tracked module flydsl/expr/arith.py",
    f"flydsl/__init__.{EXT}": "an extension module that shadows the tracked module flydsl/__init__.py",
    "flydsl/compiler/__pycache__/jit_argument.cpython-311.pyc":
        "bytecode, which the import system may run instead of the sources",
    "flydsl.libs/__pycache__/x.cpython-311.pyc": "bytecode, which the import system may run instead of the sources",
    "zz-flydsl.pth": "a .pth file, run by every interpreter that has it on its site path",
    "flydsl/zz.pth": "a .pth file",
    "flydsl.libs/zz.pth": "a .pth file",
    "sitecustomize.py": "a site customisation module, run by every interpreter that has it on its path",
    "usercustomize.py": "a site customisation module, run by every interpreter that has it on its path",
    "kernels/__init__.py": "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/",
    "flydsl-0.2.2.data/purelib/sitecustomize.py":
        "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/",
    "flydsl/../sitecustomize.py": "not a plain relative path",
    "/flydsl/zz.py": "not a plain relative path",
    "flydsl//zz.py": "not a plain relative path",
    "flydsl\\zz.py": "not a plain relative path",
}

# Names a real wheel may hold beside the tracked ones: none of them is refused.
ALLOWED = [
    "flydsl/compiler/helpers/__init__.py",  # a package no tracked module has the name of
    "flydsl/compiler/jit_argument_impl.py",
    f"flydsl/compiler/argument.{EXT}",
    "flydsl/",  # folder entries
    "flydsl/compiler/jit_argument/",
    "flydsl.libs/libz.so.1",
]


def wheel_and_sources(tmp_path: "os.PathLike[str]", extra: Dict[str, bytes]) -> Dict[str, str]:
    base = str(tmp_path)
    files = {**{"flydsl/" + rel: data for rel, data in SOURCES.items()}, **WHEEL_ONLY, **extra}
    return {"wheel": make_wheel(os.path.join(base, "flydsl-0.2.2-cp311-cp311-linux_x86_64.whl"), files),
            "sources": make_sources(os.path.join(base, "python", "flydsl"), SOURCES)}


def test_the_small_wheel_has_the_shape(tmp_path: "os.PathLike[str]") -> None:
    """The control: without an extra file the small wheel is proven (its sources byte-identical)."""
    made = wheel_and_sources(tmp_path, {})
    found = check_provenance(made["wheel"], made["sources"], sorted(SOURCES))
    assert found.proven and found.foreign == ()
    assert found.summary() == f"all {len(SOURCES)} files are byte-identical"


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_an_extra_file_is_refused_with_its_reason(tmp_path: "os.PathLike[str]", name: str) -> None:
    made = wheel_and_sources(tmp_path, {name: RUN})
    found = check_provenance(made["wheel"], made["sources"], sorted(SOURCES))
    assert found.foreign == (f"{name} ({EXTRA[name]})",)
    assert found.differ == () and found.missing == ()  # the sources are the pin's: only the shape refuses it
    assert not found.proven
    assert found.summary() == f"the wheel holds 1 files a FlyDSL wheel must not, e.g. {name} ({EXTRA[name]})"


@pytest.mark.parametrize("name", ALLOWED)
def test_a_file_that_shadows_nothing_is_allowed(tmp_path: "os.PathLike[str]", name: str) -> None:
    made = wheel_and_sources(tmp_path, {name: b""})
    found = check_provenance(made["wheel"], made["sources"], sorted(SOURCES))
    assert found.proven and found.foreign == (), found.foreign
