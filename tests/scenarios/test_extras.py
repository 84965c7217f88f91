"""The ``[s3]`` extra installs next to what S3 users already have: ``pip install 'ensure-flydsl[s3]' boto3``
in a fresh venv with pip 23.2 on Python 3.11 (a resolver that once gave up on it, ResolutionImpossible,
while ``pip install s3fs boto3`` worked), and what it installs imports."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.index  # the packages come from the package index

PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def python_311() -> str:
    """This interpreter if it is 3.11, else pyenv's 3.11 (the machine has one; the test fails without)."""
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3")))
    assert found, "this test needs a Python 3.11 (pyenv install 3.11)"
    return found[-1]


def test_the_s3_extra_installs_beside_boto3_with_pip_23_2(tmp_path: "os.PathLike[str]") -> None:
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([python_311(), "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    quiet = ["-q", "--disable-pip-version-check"]
    subprocess.run([python, "-m", "pip", "install", *quiet, "pip==23.2"], check=True)
    out = subprocess.run([python, "-m", "pip", "install", *quiet, f"{PROJECT}[s3]", "boto3"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout[-3000:]
    check = ("import boto3, s3fs, fsspec; from ensure_flydsl.binary_cache.entries import open_cache; "
             "fs = fsspec.filesystem('s3', anon=True); print(s3fs.__version__, boto3.__version__)")
    shown = subprocess.run([python, "-c", check], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           check=False, cwd=str(tmp_path))
    assert shown.returncode == 0, shown.stdout
