"""compileall's worker count for a tree: one worker for a few modules (its pool's start costs more than it
saves), a worker per core from POOL_FROM modules on, counted across the folders it compiles."""

from __future__ import annotations

import os
from typing import List

from ensure_flydsl.ways.tree import POOL_FROM, _compile_jobs


def modules(folder: str, count: int, other: int = 0) -> str:
    os.makedirs(os.path.join(folder, "sub"), exist_ok=True)
    for i in range(count):
        with open(os.path.join(folder, "sub" if i % 2 else "", f"m{i}.py"), "w") as handle:
            handle.write(f"x = {i}\n")
    for i in range(other):  # not modules: never counted
        with open(os.path.join(folder, f"lib{i}.so"), "w") as handle:
            handle.write("")
    return folder


def test_a_few_modules_take_one_worker(tmp_path: "os.PathLike[str]") -> None:
    assert _compile_jobs([modules(os.path.join(str(tmp_path), "a"), POOL_FROM - 1, other=100)]) == "1"


def test_many_modules_take_a_worker_per_core(tmp_path: "os.PathLike[str]") -> None:
    assert _compile_jobs([modules(os.path.join(str(tmp_path), "a"), POOL_FROM)]) == "0"


def test_the_modules_of_every_folder_count(tmp_path: "os.PathLike[str]") -> None:
    half = (POOL_FROM + 1) // 2  # each folder alone below the bound, both together at it or above
    folders: List[str] = [modules(os.path.join(str(tmp_path), name), half) for name in ("a", "b")]
    assert _compile_jobs(folders[:1]) == "1" and _compile_jobs(folders) == "0"
