"""A tag or branch pin that moved after a tree was built from it (issue 26, item 7): `--exact-pin` kept the old
commit even under `--verify`.  Under `--verify` the ref is resolved again (one `git ls-remote`); without it, the
tree built from the pin's name answers, as the README says (a warm call never touches the network)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.flydsl_fixture import FixtureRepo, git
from tests.helpers.workspace import Workspace


@pytest.mark.parametrize("kind", ["tag", "branch"])
def test_exact_pin_under_verify_follows_a_moved_ref(tmp_path: "object", own_repo: FixtureRepo, kind: str) -> None:
    ws = Workspace(f"{tmp_path}/base", own_repo)
    first = own_repo.commits["dev"]
    if kind == "tag":
        git(own_repo.path, "tag", "moving", first)
    else:
        git(own_repo.path, "branch", "moving", first)
    env = {"FLYDSL_PIN": "moving", "FLYDSL_EXACT_PIN": "1"}
    assert ws.run(**env).returncode == 0
    assert ws.env_twin()["commit"] == first
    second = own_repo.commit("moved", "0.2.2")
    git(own_repo.path, *(["tag", "-f", "moving", second] if kind == "tag" else ["branch", "-f", "moving", second]))
    kept = json.loads(ws.run("--json", **env).stdout)
    assert kept["action"] == "warm" and kept["commit"] == first  # no --verify: no network, as documented
    moved = ws.run("--json", "--verify", **env)
    assert moved.returncode == 0, moved.stderr
    result = json.loads(moved.stdout)
    assert result["commit"] == second and result["built"] is True, result
    assert f"the pin moving names {second[:12]}" in moved.stderr
    again = ws.run("--json", "--verify", **env)  # now the tree is the pin's: verified, nothing built
    assert json.loads(again.stdout)["built"] is False and ws.count("build") == 2


def test_exact_pin_under_verify_offline_keeps_the_tree_and_says_so(tmp_path: "object", own_repo: FixtureRepo) -> None:
    ws = Workspace(f"{tmp_path}/base", own_repo)
    git(own_repo.path, "tag", "offline-pin", own_repo.commits["dev"])
    assert ws.run(FLYDSL_PIN="offline-pin", FLYDSL_EXACT_PIN="1").returncode == 0
    out = ws.run("--verify", FLYDSL_PIN="offline-pin", FLYDSL_EXACT_PIN="1",
                 FLYDSL_GIT_MIRRORS=f"{ws.repo.url}=file:///nonexistent/mirror.git")
    assert out.returncode == 0, out.stderr
    assert "where offline-pin points now is unknown" in out.stdout and ws.count("build") == 1
