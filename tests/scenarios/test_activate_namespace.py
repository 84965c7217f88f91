"""``activate()`` after ``import kernels`` of a folder without ``__init__.py`` (a namespace package) raises
AlreadyImported as it does for a regular package (issue 19, item 11): the namespace's path never takes in
the tree's regular ``kernels``, so ``import kernels.moe_gemm_2stage`` after the activation would fail."""

from __future__ import annotations

import os

from tests.helpers.flydsl_fixture import write
from tests.helpers.workspace import Workspace
from tests.scenarios.test_api_activate import api

CODE = r"""
result = ensure_flydsl.ensure()
sys.path.insert(0, OTHER)
import kernels
before = state()
try:
    ensure_flydsl.activate(result)
except EnsureError as exc:
    print(json.dumps({"code": int(exc.code), "message": str(exc), "type": type(exc).__name__,
                      "tree_file": result.files["kernels.moe_gemm_2stage"], "unchanged": state() == before}))
else:
    try:
        import kernels.moe_gemm_2stage
        print(json.dumps({"code": None, "imported": kernels.moe_gemm_2stage.__file__}))
    except ImportError as exc:
        print(json.dumps({"code": None, "import_error": str(exc)}))
"""


def test_activate_after_a_namespace_kernels_was_imported_raises(ws: Workspace,
                                                               tmp_path: "os.PathLike[str]") -> None:
    other = os.path.join(str(tmp_path), "elsewhere")
    write(os.path.join(other, "kernels", "my_notes.py"), "X = 1\n")  # a folder `kernels` without __init__.py
    data = api(ws, CODE.replace("OTHER", repr(other)))
    assert data["code"] == 6 and data["type"] == "AlreadyImported", data
    message = str(data["message"])
    assert message.startswith(f"kernels is already imported from {os.path.join(other, 'kernels')}; "
                              f"the tree is {data['tree_file']}; "), message
    assert data["unchanged"] is True

