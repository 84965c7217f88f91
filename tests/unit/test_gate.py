"""The reuse decision: pure functions, tested exhaustively on hand-made probe results."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import pytest
from packaging.version import InvalidVersion

from ensure_flydsl.layout import tree_folders
from ensure_flydsl.probe.gate import evaluate, one_tree, package_folder
from ensure_flydsl.probe.results import Interpreter, ModuleResult, Probe
from ensure_flydsl.settings import release_at_least

INTERP = Interpreter(executable="/usr/bin/python3", version="3.11.7", implementation="cpython", cache_tag="cpython-311",
                     soabi="cpython-311-x86_64-linux-gnu",
                     platform="linux-x86_64", prefix="/usr", base_prefix="/usr",
                     site_dirs=("/usr/lib/python3/site-packages",), stdlib="/usr/lib/python3.11", include="")
REQUIRE = ("flydsl", "kernels.moe_gemm_2stage")


def probe(files: Dict[str, Tuple[Optional[str], Optional[str]]], version: Optional[str] = "0.2.2") -> Probe:
    modules = tuple(ModuleResult(name, f, e) for name, (f, e) in files.items())
    return Probe(interpreter=INTERP, modules=modules, version=version,
                 version_error=None if version else "flydsl has no __version__", pythonpath="", seconds=0.1)


BUILT = {
    "flydsl": ("/r/build-fly/python_packages/flydsl/__init__.py", None),
    "kernels.moe_gemm_2stage": ("/r/kernels/moe_gemm_2stage.py", None),
}


@pytest.mark.parametrize(
    "version, floor, ok",
    [
        ("0.2.2", "0.2.2", True),
        ("0.2.3", "0.2.2", True),
        ("0.2.10", "0.2.2", True),
        ("0.2.1", "0.2.2", False),
        ("0.2.2.dev12+ga35627a2", "0.2.2", True),  # dev builds carry their base version
        ("0.2.2rc1", "0.2.2", True),  # release segment only, as the bash script this tool replaces compared
        ("0.2", "0.2.0", True),  # trailing zeros are equal
        ("1.0", "0.2.2", True),
        ("0.2.2", "0.2.3", False),
        ("0.3.0", "0.2.3.dev1", True),
    ],
)
def test_release_at_least(version: str, floor: str, ok: bool) -> None:
    assert release_at_least(version, floor) is ok


def test_unparseable_version_raises() -> None:
    with pytest.raises(InvalidVersion):
        release_at_least("not-a-version", "0.2.2")


@pytest.mark.parametrize(
    "module, file, folder",
    [
        ("flydsl", "/p/flydsl/__init__.py", "/p"),
        ("kernels.moe_gemm_2stage", "/x/kernels/moe_gemm_2stage.py", "/x"),
        ("kernels", "/x/kernels/__init__.py", "/x"),
        ("a.b.c", "/s/a/b/c.cpython-311-x86_64-linux-gnu.so", "/s"),
        ("a.b", "/s/a/b/__init__.pyc", "/s"),
    ],
)
def test_package_folder(module: str, file: str, folder: str) -> None:
    assert package_folder(module, file) == folder


def test_one_tree() -> None:
    assert one_tree(["/r", "/r/build-fly/python_packages"]) == "/r"
    assert one_tree(["/r/build-fly/python_packages", "/r"]) == "/r"
    assert one_tree(["/site", "/site"]) == "/site"
    assert one_tree(["/site-packages", "/home/me/FlyDSL"]) is None
    assert one_tree(["/r", "/r2"]) is None  # a prefix of the name is not a parent folder


def test_built_tree_is_reusable() -> None:
    verdict = evaluate(probe(BUILT), "0.2.2", REQUIRE)
    assert verdict.reusable and verdict.tree == "/r" and verdict.version == "0.2.2"
    assert "one tree: /r" in verdict.reason


def test_import_failure_is_not_reusable_and_says_which() -> None:
    verdict = evaluate(
        probe({"flydsl": ("/r/flydsl/__init__.py", None),
               "kernels.moe_gemm_2stage": (None, "ModuleNotFoundError: No module named 'kernels'")}),
        "0.2.2", REQUIRE,
    )
    assert not verdict.reusable
    assert "kernels.moe_gemm_2stage does not import: ModuleNotFoundError" in verdict.reason


def test_two_trees_are_not_reusable() -> None:
    verdict = evaluate(
        probe({"flydsl": ("/usr/lib/python3/site-packages/flydsl/__init__.py", None),
               "kernels.moe_gemm_2stage": ("/home/me/FlyDSL/kernels/moe_gemm_2stage.py", None)}),
        "0.2.2", REQUIRE,
    )
    assert not verdict.reusable and verdict.tree is None
    assert "different trees" in verdict.reason


def test_old_version_is_not_reusable() -> None:
    verdict = evaluate(probe(BUILT, "0.2.1"), "0.2.2", REQUIRE)
    assert not verdict.reusable and "older than the floor 0.2.2" in verdict.reason


def test_unparseable_version_fails_the_gate() -> None:
    # The bash script this tool replaces treated a failed comparison as "equal" and reused anything; here it is refused.
    verdict = evaluate(probe(BUILT, "banana"), "0.2.2", REQUIRE)
    assert not verdict.reusable and "cannot be parsed" in verdict.reason


def test_missing_version_fails_the_gate() -> None:
    verdict = evaluate(probe(BUILT, None), "0.2.2", REQUIRE)
    assert not verdict.reusable and "no __version__" in verdict.reason


def test_namespace_package_without_file_fails() -> None:
    verdict = evaluate(
        probe({"flydsl": (None, "imported as a namespace package without a file (no __init__.py)"),
               "kernels.moe_gemm_2stage": ("/r/kernels/moe_gemm_2stage.py", None)}),
        "0.2.2", REQUIRE,
    )
    assert not verdict.reusable and "namespace package" in verdict.reason


def test_tree_folders_order_matches_the_env_file() -> None:
    assert tree_folders("/opt/flydsl/FlyDSL") == ["/opt/flydsl/FlyDSL", "/opt/flydsl/FlyDSL/build-fly/python_packages"]
