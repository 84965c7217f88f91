"""A pin switched back under --exact-pin (issue 28, item 4): the root's tree, stamped for the other pin, is
ruled out by its stamp alone, so no probe imports it (before, four probes did: the root's and the
interpreter's path, before and after the lock); A comes back from the host store.  The env file of B stays
until A's build begins, and goes when A (here a pin that does not exist) cannot be provisioned and B's
tree no longer passes its own gate."""

from __future__ import annotations

import json
import os

from tests.helpers.flydsl_fixture import FixtureRepo
from tests.helpers.scenario import assert_one_tree, ensure_json
from tests.scenarios.test_host_store import packaged, root_of


def test_a_pin_switched_back_probes_no_tree(tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    assert ensure_json(a)["how"] == "built"
    b = ensure_json(a, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    assert b["ok"] is True and b["commit"] != fixture_repo.commits["dev"], b["_stderr"]
    imports = a.count("import")
    back = ensure_json(a, FLYDSL_EXACT_PIN="1")
    said = str(back["_stderr"])
    assert back["commit"] == fixture_repo.commits["dev"] and back["link_mode"] == "copy", said
    assert a.count("import") == imports, f"the switch back imported a tree {a.count('import') - imports} times"
    assert f"not probing the tree in {a.root}: it was built from v0.2.3" in said, said
    assert "store: not probed again" in said and a.count("build") == 2
    assert_one_tree(a)
    assert ensure_json(a, FLYDSL_EXACT_PIN="1")["action"] == "warm"


def test_a_switch_back_that_fails_keeps_a_true_env_file_and_takes_away_an_untrue_one(
        tmp_path: "os.PathLike[str]", fixture_repo: FixtureRepo) -> None:
    store = os.path.join(str(tmp_path), "store")
    a = root_of(str(tmp_path), fixture_repo, "a", store)
    ensure_json(a, FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1")
    with open(a.env_json) as handle:
        twin = handle.read()
    failed = a.run("--json", FLYDSL_EXACT_PIN="1", FLYDSL_PIN="v9.9.9")
    assert failed.returncode == 3, failed.stderr
    assert json.loads(failed.stdout)["stage"] == "checkout"
    with open(a.env_json) as handle:
        assert handle.read() == twin, "a true env file went before A's build began"
    assert "took away" not in failed.stderr
    os.remove(packaged(a, "flydsl/_mlir/_mlir_libs/_mlir.py"))  # B's tree breaks: its env file is untrue now
    again = a.run("--json", FLYDSL_EXACT_PIN="1", FLYDSL_PIN="v9.9.9")
    assert again.returncode == 3, again.stderr
    assert not os.path.exists(a.env_file) and not os.path.exists(a.env_json)
    assert f"took away {a.env_file}: the tree it names does not pass the probe now" in again.stderr, again.stderr
    marker = a.marker()
    assert marker["exit_code"] == 3 and marker["stage"] == "checkout"
