"""A root claimed by a concurrent caller while this one classifies it (issue 27's third pass: 16 blocking and
16 detached callers on a cold root once got exit 64, "it holds other files (.ensure_flydsl)"): the claim is
made to land at the moment the root is listed, and the root must read as the tool's, never as foreign."""

from __future__ import annotations

import os
from typing import Callable, List

import pytest

from ensure_flydsl.source import root as root_module
from ensure_flydsl.source.root import RootKind, claim_root, classify_root


def test_a_claim_that_lands_while_the_root_is_read_is_the_tools(tmp_path: "os.PathLike[str]",
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = os.path.join(str(tmp_path), "FlyDSL")
    os.makedirs(root)
    real_listdir: Callable[[str], List[str]] = os.listdir
    claimed: List[str] = []

    def listdir_as_another_caller_claims(path: str) -> List[str]:
        if path == root and not claimed:  # the other caller's rename lands now, between this caller's reads
            claim_root(root, created=True, adopted=False)
            claimed.append(root)
        return real_listdir(path)

    monkeypatch.setattr(root_module.os, "listdir", listdir_as_another_caller_claims)
    state = classify_root(root, "file:///upstream/FlyDSL.git")
    assert claimed, "the root was never listed"
    assert state.kind is RootKind.OURS, state.reason


def test_a_state_folder_without_an_owner_is_still_somebody_elses(tmp_path: "os.PathLike[str]") -> None:
    root = os.path.join(str(tmp_path), "FlyDSL")
    os.makedirs(os.path.join(root, ".ensure_flydsl"))
    state = classify_root(root, "file:///upstream/FlyDSL.git")
    assert state.kind is RootKind.FOREIGN and ".ensure_flydsl" in state.reason
