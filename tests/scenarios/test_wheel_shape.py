"""A release wheel must have the shape of a real FlyDSL wheel (issue 19, item 1), not only hold the pin's
sources byte for byte: the real flydsl 0.2.2 wheel from the package index, with one extra file added (its
RECORD naming it, as a wheel built that way would carry), is refused before anything of it is installed:
exit 8 under ``release``, one line and the source build under ``auto``.

Which names are refused, and why, is a pure rule (``wheels/wheel_shape.py``): each kind of extra file is
tests/unit/test_wheel_shape.py, on a small wheel made there.  Here the run around it, once, on the real wheel
(one extended copy for the module: the cases only read it)."""

from __future__ import annotations

import json
import os
import zipfile

import pytest

from ensure_flydsl.ways.release.wheels import shape_problems
from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.release_fixture import extended_wheelhouse, wheel_in, wheel_sources
from tests.helpers.workspace import Workspace
from tests.scenarios.test_provenance import assert_no_wheel_installed, messages, offline

pytestmark = pytest.mark.index  # the real flydsl wheel from the package index

RUN = b"import os; open(os.environ.get('FIXTURE_COUNTER_DIR', '/tmp') + '/wheel-code-ran', 'w')\n"
# A package that wins the import over the tracked module flydsl/compiler/jit_argument.py: installed, the probe's
# import of flydsl would run it (and write wheel-code-ran).
NAME = "flydsl/compiler/jit_argument/__init__.py"
REFUSAL = ("the index's flydsl 0.2.2 wheel holds 1 files a FlyDSL wheel must not hold, e.g. "
           f"{NAME} (a package that shadows the tracked module flydsl/compiler/jit_argument.py)")


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory, wheelhouse: str) -> str:
    """A wheelhouse holding the real wheel with NAME added (its RECORD naming it)."""
    return extended_wheelhouse(wheelhouse, str(tmp_path_factory.mktemp("extended")), {NAME: RUN})


def test_release_refuses_a_wheel_with_an_extra_file(ws: Workspace, shaped: str, release_repo: FixtureRepo) -> None:
    out = ws.run(FLYDSL_REPO=release_repo.url, **offline(shaped, "release"))
    assert out.returncode == 8, out.stdout + out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"
    assert marker["reason"] == REFUSAL
    assert "FLYDSL_STRATEGY=source" in str(marker["hint"]) and REFUSAL in out.stderr
    assert "is built from the pin" not in out.stdout + out.stderr
    assert_no_wheel_installed(ws)
    assert not os.path.exists(os.path.join(ws.counter, "wheel-code-ran"))
    assert ws.count("build") == 0 and not os.path.exists(ws.env_file)


def test_auto_says_one_line_and_builds_from_source(ws: Workspace, shaped: str, release_repo: FixtureRepo) -> None:
    out = ws.run("--json", FLYDSL_REPO=release_repo.url, **offline(shaped))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["how"] == "built" and ws.count("build") == 1
    said = [t for t in messages(out.stderr) if "must not hold" in t]
    assert said == [REFUSAL + "; building the pin from source instead"], messages(out.stderr)
    assert_no_wheel_installed(ws)
    assert not os.path.exists(os.path.join(ws.counter, "wheel-code-ran"))


def test_the_real_wheel_has_the_shape(wheelhouse: str) -> None:
    """The control: the rule refuses none of the real wheel's names, with its own sources as the tracked files
    (what the release repository's v0.2.2 holds); that it then installs is tests/scenarios/test_release.py."""
    wheel = wheel_in(wheelhouse)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tracked = sorted(wheel_sources(wheel))
    assert len(tracked) == 48 and len(names) > 100
    assert shape_problems(names, tracked) == []
