"""The ``[s3]`` extra installs next to what S3 users already have: ``pip install 'ensure-flydsl[s3]' boto3``
in a fresh venv with pip 23.2 on Python 3.11 (a resolver that once gave up on it, ResolutionImpossible,
while ``pip install s3fs boto3`` worked), and what it installs imports.

The botocore that the newest aiobotocore takes is given to that command as a constraint.  boto3 and botocore
are released every working day, aiobotocore (which pins botocore to a few releases) every few weeks; without
the constraint pip 23.2 steps back through every boto3 release in between, one at a time, and checks each
against every aiobotocore: five minutes here on 2026-12-02, and longer with each boto3 release, a figure of
the package index's calendar more than of the extra.  With the botocore settled the command still resolves
the extra, s3fs, aiobotocore and boto3 together with pip 23.2's resolver, and still fails where the extra's
own requirements leave no solution (naming fsspec or a botocore, as it once did).  What it no longer shows is
how long the unconstrained walk takes: benchmarks/extras_resolution.py measures both side by side."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from typing import List

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.index  # the packages come from the package index



def python_311() -> str:
    """This interpreter if it is 3.11, else pyenv's 3.11 (the machine has one; the test fails without)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3")))
    assert found, "this test needs a Python 3.11 (pyenv install 3.11)"
    return found[-1]


def requirement_of(python: str, spec: str, name: str, folder: str) -> str:
    """The requirement on ``name`` of the newest release that ``spec`` admits, as its wheel's metadata says it
    (``pip download --no-deps``: one wheel, no resolution)."""
    os.makedirs(folder, exist_ok=True)
    subprocess.run([python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--only-binary", ":all:", "-d", folder, spec], check=True)
    [wheel] = glob.glob(os.path.join(folder, "*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines: List[str] = archive.read(metadata).decode().splitlines()
    found = [Requirement(line.split(":", 1)[1]) for line in lines if line.startswith("Requires-Dist:")]
    [requirement] = [r for r in found if r.name == name and r.marker is None]
    return f"{name}{requirement.specifier}"


def test_the_s3_extra_installs_beside_boto3_with_pip_23_2(tmp_path: "os.PathLike[str]", project_wheel: str) -> None:
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([python_311(), "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    quiet = ["-q", "--disable-pip-version-check", "--no-compile"]  # what runs compiles what it imports
    subprocess.run([python, "-m", "pip", "install", *quiet, "pip==23.2"], check=True)
    # The extra's aiobotocore floor, within what the newest s3fs admits; then what that aiobotocore needs.
    aiobotocore = requirement_of(python, "s3fs>=2025.5.0", "aiobotocore", os.path.join(str(tmp_path), "s3fs"))
    botocore = requirement_of(python, f"{aiobotocore},>=2.19.0", "botocore", os.path.join(str(tmp_path), "aiobotocore"))
    constraints = os.path.join(str(tmp_path), "constraints.txt")
    with open(constraints, "w") as handle:
        handle.write(botocore + "\n")
    out = subprocess.run([python, "-m", "pip", "install", *quiet, "-c", constraints, f"{project_wheel}[s3]", "boto3"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout[-3000:]
    check = ("import boto3, s3fs, fsspec; from ensure_flydsl.trees.remote import open_cache; "
             "fs = fsspec.filesystem('s3', anon=True); print(s3fs.__version__, boto3.__version__)")
    shown = subprocess.run([python, "-c", check], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           check=False, cwd=str(tmp_path))
    assert shown.returncode == 0, shown.stdout
