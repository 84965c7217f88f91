"""A release wheel must have the shape of a real FlyDSL wheel (issue 19, item 1), not only hold the pin's
sources byte for byte: the real flydsl 0.2.2 wheel from the package index, with one extra file added (its
RECORD naming it, as a wheel built that way would carry), is refused before anything of it is installed:
exit 8 under ``release``, one line and the source build under ``auto``."""

from __future__ import annotations

import json
import os
import sys
from typing import Dict

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.release_fixture import extended_wheelhouse
from tests.helpers.workspace import Workspace
from tests.scenarios.test_provenance import assert_no_wheel_installed, messages, offline

pytestmark = pytest.mark.index  # the real flydsl wheel from the package index

EXT = "cpython-%d%d-x86_64-linux-gnu.so" % sys.version_info[:2]
RUN = b"import os; open(os.environ.get('FIXTURE_COUNTER_DIR', '/tmp') + '/wheel-code-ran', 'w')\n"

# Each kind of extra file, and the reason the refusal gives for it.
EXTRA: Dict[str, str] = {
    "flydsl/compiler/jit_argument/__init__.py":
        "a package that shadows the tracked module flydsl/compiler/jit_argument.py",
    f"flydsl/compiler/jit_argument.{EXT}":
        "an extension module that shadows the tracked module flydsl/compiler/jit_argument.py",
    "flydsl/expr/arith.abi3.so": "an extension module that shadows the tracked module flydsl/expr/arith.py",
    f"flydsl/__init__.{EXT}": "an extension module that shadows the tracked module flydsl/__init__.py",
    "flydsl/compiler/__pycache__/jit_argument.cpython-311.pyc":
        "bytecode, which the import system may run instead of the sources",
    "zz-flydsl.pth": "a .pth file, run by every interpreter that has it on its site path",
    "flydsl/zz.pth": "a .pth file",
    "sitecustomize.py": "a site customisation module, run by every interpreter that has it on its path",
    "usercustomize.py": "a site customisation module, run by every interpreter that has it on its path",
    "kernels/__init__.py": "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/",
    "flydsl-0.2.2.data/purelib/sitecustomize.py":
        "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/",
}


def refusal(name: str) -> str:
    return f"the index's flydsl 0.2.2 wheel holds 1 files a FlyDSL wheel must not hold, e.g. {name} ({EXTRA[name]})"


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_release_refuses_a_wheel_with_an_extra_file(ws: Workspace, wheelhouse: str, release_repo: FixtureRepo,
                                                     tmp_path: "os.PathLike[str]", name: str) -> None:
    shaped = extended_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "extended"), {name: RUN})
    out = ws.run(FLYDSL_REPO=release_repo.url, **offline(shaped, "release"))
    assert out.returncode == 8, out.stdout + out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"
    assert marker["reason"] == refusal(name)
    assert "FLYDSL_STRATEGY=source" in str(marker["hint"]) and refusal(name) in out.stderr
    assert "is built from the pin" not in out.stdout + out.stderr
    assert_no_wheel_installed(ws)
    assert not os.path.exists(os.path.join(ws.counter, "wheel-code-ran"))
    assert ws.count("build") == 0 and not os.path.exists(ws.env_file)


@pytest.mark.parametrize("name", ["flydsl/compiler/jit_argument/__init__.py", "zz-flydsl.pth"])
def test_auto_says_one_line_and_builds_from_source(ws: Workspace, wheelhouse: str, release_repo: FixtureRepo,
                                                   tmp_path: "os.PathLike[str]", name: str) -> None:
    shaped = extended_wheelhouse(wheelhouse, os.path.join(str(tmp_path), "extended"), {name: RUN})
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(shaped))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built" and ws.count("build") == 1
    said = [t for t in messages(out.stderr) if "must not hold" in t]
    assert said == [refusal(name) + "; building the pin from source instead"], messages(out.stderr)
    assert_no_wheel_installed(ws)
    assert not os.path.exists(os.path.join(ws.counter, "wheel-code-ran"))


def test_the_real_wheel_has_the_shape(ws: Workspace, wheelhouse: str, release_repo: FixtureRepo) -> None:
    """The shape check refuses nothing of the real wheel: it is still installed (the control)."""
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(wheelhouse, "release"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "released"
