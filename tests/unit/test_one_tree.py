"""The gate's one-tree rule, as pure functions: a folder inside a tree (a checkout's own `.venv`) is not
one of that tree's import folders (the folder itself, or its build-fly/python_packages)."""

from __future__ import annotations

import os

import pytest

from ensure_flydsl.probe.gate import evaluate, one_tree
from ensure_flydsl.probe.results import Interpreter, ModuleResult, Probe

REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")
SITE = "/home/me/FlyDSL/.venv/lib/python3.11/site-packages"
INTERP = Interpreter(executable="/home/me/FlyDSL/.venv/bin/python", version="3.11.7", implementation="cpython",
                     cache_tag="cpython-311",
                     soabi="cpython-311-x86_64-linux-gnu", platform="linux-x86_64", prefix="/home/me/FlyDSL/.venv",
                     base_prefix="/usr", site_dirs=(SITE,),
                     stdlib="/usr/lib/python3.11", include="")


def _probe(flydsl: str, kernel: str) -> Probe:
    modules = (ModuleResult("flydsl", flydsl, None), ModuleResult("kernels.moe_gemm_2stage", kernel, None))
    return Probe(interpreter=INTERP, modules=modules, version="0.2.5", version_error=None, pythonpath="", seconds=0.1)


@pytest.mark.parametrize("flydsl", [
    f"{SITE}/flydsl/__init__.py",  # the checkout's own venv
    "/home/me/FlyDSL/python/flydsl/__init__.py",  # the source folder, not a build's output
    "/home/me/FlyDSL/build-fly/other/flydsl/__init__.py",
    "/home/me/FlyDSL/sub/build-fly/python_packages/flydsl/__init__.py",  # another tree's build inside it
])
def test_a_folder_inside_the_tree_is_not_the_tree(flydsl: str) -> None:
    verdict = evaluate(_probe(flydsl, "/home/me/FlyDSL/kernels/moe_gemm_2stage.py"), "0.2.2", REQUIRE)
    assert not verdict.reusable and verdict.tree is None
    assert "different trees" in verdict.reason and "flydsl from " + os.path.dirname(os.path.dirname(flydsl)) \
        in verdict.reason


@pytest.mark.parametrize("flydsl, kernel, tree", [
    ("/r/build-fly/python_packages/flydsl/__init__.py", "/r/kernels/moe_gemm_2stage.py", "/r"),
    ("/r/flydsl/__init__.py", "/r/kernels/moe_gemm_2stage.py", "/r"),
    (f"{SITE}/flydsl/__init__.py", f"{SITE}/kernels/moe_gemm_2stage.py", SITE),  # both in the venv: one install
])
def test_the_trees_own_import_folders_are_one_tree(flydsl: str, kernel: str, tree: str) -> None:
    verdict = evaluate(_probe(flydsl, kernel), "0.2.2", REQUIRE)
    assert verdict.reusable and verdict.tree == tree


def test_one_tree_and_own_tree() -> None:
    from ensure_flydsl.probe.gate import own_tree

    assert own_tree("/r/build-fly/python_packages") == "/r"
    assert own_tree("/r/build-fly/python_packages/") == "/r"
    assert own_tree("/r/.venv/lib/python3.11/site-packages") == "/r/.venv/lib/python3.11/site-packages"
    assert one_tree(["/r", "/r/.venv/lib/python3.11/site-packages"]) is None
    assert one_tree(["/r/.venv/lib/python3.11/site-packages", "/r"]) is None
    assert one_tree(["/r", "/r/python"]) is None
    assert one_tree(["/r", "/r/build-fly/python_packages", "/r"]) == "/r"
    assert one_tree([]) is None


def test_one_tree_sees_through_symlinks(tmp_path: "os.PathLike[str]") -> None:
    real = os.path.join(str(tmp_path), "real")
    os.makedirs(os.path.join(real, "build-fly", "python_packages"))
    link = os.path.join(str(tmp_path), "link")
    os.symlink(real, link)
    assert one_tree([link, os.path.join(real, "build-fly", "python_packages")]) == link
    os.makedirs(os.path.join(real, ".venv"))
    assert one_tree([link, os.path.join(real, ".venv")]) is None
