"""A full disk during the wheel's download (issue 19, item 15) is said as such, with the folder: not "no
wheel could be downloaded" with the package index blamed.  The root is on a tmpfs too small for the real
flydsl 0.2.2 wheel."""

from __future__ import annotations

import os
import re
from typing import Iterator

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.reliability import tmpfs
from tests.helpers.workspace import Workspace
from tests.scenarios.test_provenance import offline

pytestmark = pytest.mark.index  # the real flydsl wheel from the package index


@pytest.fixture
def small_ws(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> Iterator[Workspace]:
    """A workspace on an 8 MiB tmpfs: room for the checkout, not for the 75 MB wheel."""
    with tmpfs(os.path.join(str(tmp_path), "small-disk"), "8m") as disk:
        yield Workspace(os.path.join(disk, "base"), fixture_repo)


def test_a_full_disk_during_the_download_is_named(small_ws: Workspace, wheelhouse: str) -> None:
    ws = small_ws
    out = ws.run(**offline(wheelhouse, "release"))
    assert out.returncode == 8, out.stdout + out.stderr
    marker = ws.marker()
    assert marker["exit_code"] == 8 and marker["stage"] == "release"
    folders = "|".join(re.escape(os.path.join(ws.root, f)) for f in (".ensure_flydsl/wheel-download",
                                                                      "build-fly/.wheel-download"))
    reason = str(marker["reason"])
    assert re.fullmatch(rf"the flydsl==0\.2\.2 wheel could not be downloaded into ({folders}): no space left on the "
                        rf"file system holding \1 \(df: [\d.]+ (B|[KMG]iB) free of [\d.]+ MiB, mounted at "
                        rf"{re.escape(os.path.dirname(ws.base))}\)", reason), reason
    assert "free space on the file system of" in str(marker["hint"])
    assert "could be downloaded" not in out.stderr and reason in out.stderr
