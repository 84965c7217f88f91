"""What pip installs: the dependency floors that the code needs (packaging 21.1 is the first with
``packaging.tags.platform_tags``, which the release way uses: with 21.0 a cold release run ended in a
traceback, exit 70), the license as an SPDX expression with its file, the project URLs."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import zipfile

import pytest

pytestmark = pytest.mark.index  # the build backend and the dependencies come from the package index

QUIET = ["-q", "--disable-pip-version-check"]


def test_packaging_21_0_cannot_be_installed_with_the_tool_and_21_1_works(tmp_path: "os.PathLike[str]",
                                                                          project_wheel: str) -> None:
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    refused = subprocess.run([python, "-m", "pip", "install", *QUIET, project_wheel, "packaging==21.0"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert "and packaging==21.0 because these package versions have conflicting dependencies" in refused.stdout, \
        refused.stdout[-2000:]
    subprocess.run([python, "-m", "pip", "install", *QUIET, project_wheel, "packaging==21.1"], check=True)
    tags = subprocess.run([python, "-c", "from ensure_flydsl.ways.release.download import platform_tags; "
                           "print(next(iter(platform_tags())))"], stdout=subprocess.PIPE, text=True, check=True)
    assert tags.stdout.strip().startswith(("manylinux", "musllinux", "linux"))


def test_the_wheel_carries_an_spdx_license_its_file_and_the_urls(project_wheel: str) -> None:
    with zipfile.ZipFile(project_wheel) as archive:
        names = archive.namelist()
        metadata = email.message_from_bytes(archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
        license_file = next(n for n in names if n.endswith(".dist-info/licenses/LICENSE"))
        assert archive.read(license_file).startswith(b"MIT License")
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert "FlyDSL, https://github.com/ROCm/FlyDSL" in metadata.get_all("Project-URL")
