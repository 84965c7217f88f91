"""Split trees that look like one, end to end: a checkout with its own `.venv` inside it (the pure rule is
tested in tests/unit/test_one_tree.py).

flydsl comes from CHECKOUT/.venv/lib/pythonX.Y/site-packages, kernels from CHECKOUT: the venv's folder is
inside the folder that holds `kernels/`, but it is not one of that tree's import folders (the folder itself
or its build-fly/python_packages), so these are two installs and must not be reused as one tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Tuple

import pytest

from tests.helpers.flydsl_fixture import make_installed_tree, write
from tests.helpers.workspace import Workspace


def _checkout_with_venv(folder: str) -> Tuple[str, str]:
    """A FlyDSL-like checkout (kernels/ at its top) holding its own venv, whose site-packages has flydsl
    (and no kernels).  Returns (checkout, the venv's python)."""
    checkout = os.path.join(folder, "FlyDSL-checkout")
    venv = os.path.join(checkout, ".venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    assert site.startswith(venv + os.sep)
    make_installed_tree(site, "0.2.5", python)
    shutil.rmtree(os.path.join(site, "kernels"))  # the venv has flydsl only
    # The checkout's kernels (its flydsl, under python/, is unbuilt and not on the path).
    installed = make_installed_tree(os.path.join(folder, "scratch"), "0.2.5", python)
    shutil.copytree(os.path.join(installed, "kernels"), os.path.join(checkout, "kernels"))
    write(os.path.join(checkout, "python", "flydsl", "__init__.py"), '__version__ = "0.2.5"\n')
    return checkout, python


@pytest.fixture
def checkout_with_venv(tmp_path: "os.PathLike[str]") -> Tuple[str, str]:
    return _checkout_with_venv(os.path.join(str(tmp_path), "work"))


def test_verify_names_the_split(ws: Workspace, checkout_with_venv: Tuple[str, str]) -> None:
    checkout, python = checkout_with_venv
    out = ws.run("verify", FLYDSL_PYTHON=python, PYTHONPATH=checkout)
    assert out.returncode == 1, out.stdout + out.stderr  # no env file: nothing installed answers
    assert "different trees" in out.stdout
    assert f"kernels.moe_gemm_2stage from {checkout}" in out.stdout
    assert f"flydsl from {checkout}/.venv/lib/" in out.stdout
    data = json.loads(ws.run("verify", "--json", FLYDSL_PYTHON=python, PYTHONPATH=checkout).stdout)
    assert data["ok"] is False and data["tree"] is None


def test_ensure_does_not_reuse_a_split_as_one_tree(ws: Workspace, checkout_with_venv: Tuple[str, str]) -> None:
    checkout, python = checkout_with_venv
    out = ws.run("--json", FLYDSL_PYTHON=python, PYTHONPATH=checkout)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["how"] == "built" and result["tree"] == ws.root, result
    assert "reusing the tree found" not in out.stderr and "different trees" in out.stderr
    assert ws.env_twin()["tree"] == ws.root
