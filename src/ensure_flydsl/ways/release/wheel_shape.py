"""The shape of a FlyDSL wheel: which file names a release wheel may hold at all.

The provenance check (``wheels.py: check_provenance``) proves that every file the pin tracks in
``python/flydsl`` is in the wheel byte for byte; files only the wheel has (the generated ``_mlir``, the
bundled libraries) are not compared.  That alone would let a wheel add code that runs instead of, or before,
the pin's sources.  So the wheel's file list must also have the shape of a real FlyDSL wheel:

- only the top-level names ``flydsl/``, ``flydsl.libs/`` and ``flydsl-X.dist-info/`` (no ``.data`` folder,
  whose ``purelib``/``platlib``/``scripts`` would put files anywhere in the target, no other package);
- no ``.pth`` file anywhere (``site`` runs its ``import`` lines in every interpreter that has the folder on
  its site path) and no ``sitecustomize``/``usercustomize`` module;
- no ``__pycache__`` (bytecode, an unchecked-hash one in particular, runs instead of its source);
- nothing that shadows a tracked module: for a tracked ``X.py``, neither a package ``X/__init__.*`` (a
  package wins the import over a module of the same name) nor an extension module ``X.*.so``/``X.*.pyd``
  (extension suffixes come before ``.py`` in the import system's search);
- only plain relative names (no ``..``, no absolute path, no backslash, no empty part).

:func:`shape_problems` is pure: the zip's names and the tracked files in, the refused names out.
"""

from __future__ import annotations

import re
from typing import List, Sequence, Set

_DIST_INFO = re.compile(r"flydsl-[A-Za-z0-9_.+!]+\.dist-info")
_TOP = ("flydsl", "flydsl.libs")
_EXTENSION = (".so", ".pyd")
_SITE_HOOKS = ("sitecustomize", "usercustomize")


def shape_problems(names: Sequence[str], tracked: Sequence[str]) -> List[str]:
    """Each of the wheel's member ``names`` that a FlyDSL wheel must not hold, as ``name (why)``, in the
    order given.  ``tracked`` are the pin's files in ``python/flydsl``, relative to it."""
    modules = _tracked_modules(tracked)
    problems = []
    for name in names:
        why = _why_refused(name, modules)
        if why:
            problems.append(f"{name} ({why})")
    return problems


def _tracked_modules(tracked: Sequence[str]) -> Set[str]:
    """``flydsl/compiler/jit_argument`` for a tracked ``compiler/jit_argument.py``."""
    return {"flydsl/" + rel[: -len(".py")] for rel in tracked if rel.endswith(".py")}


def _why_refused(name: str, modules: Set[str]) -> str:
    path = name[:-1] if name.endswith("/") else name  # a folder entry
    parts = path.split("/")
    if not path or "\\" in path or "\0" in path or any(p in ("", ".", "..") for p in parts):
        return "not a plain relative path"
    top = parts[0]
    if top not in _TOP and not _DIST_INFO.fullmatch(top):
        if top.split(".")[0] in _SITE_HOOKS:
            return "a site customisation module, run by every interpreter that has it on its path"
        if top.endswith(".pth"):
            return "a .pth file, run by every interpreter that has it on its site path"
        return "not one of a FlyDSL wheel's top-level names flydsl/, flydsl.libs/, flydsl-X.dist-info/"
    if "__pycache__" in parts:
        return "bytecode, which the import system may run instead of the sources"
    leaf = parts[-1]
    if leaf.endswith(".pth"):
        return "a .pth file"
    if top != "flydsl" or len(parts) < 2:
        return ""
    folder = "/".join(parts[:-1])
    if folder in modules and leaf.startswith("__init__."):
        return f"a package that shadows the tracked module {folder}.py"
    stem = leaf.split(".")[0]
    if leaf.endswith(_EXTENSION) and f"{folder}/{stem}" in modules:
        return f"an extension module that shadows the tracked module {folder}/{stem}.py"
    return ""
