"""A pin switched back under --exact-pin (issue 28, item 4): the root's tree, stamped for the other pin, is
ruled out by its stamp alone, so no probe imports it (before, four probes did: the root's and the
interpreter's path, before and after the lock); A comes back from the host store.  The env file of B stays
until A's build begins, and goes when A (here a pin that does not exist) cannot be provisioned and B's
tree no longer passes its own gate."""

from __future__ import annotations

import json
import os

from tests.helpers.flydsl_fixture import FixtureRepo, write
from tests.helpers.scenario import Barrier, assert_one_tree, ensure_json, run_record_of, wait_until
from tests.helpers.workspace import Workspace
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


def test_a_reuse_that_publishes_after_another_runs_build_began_leaves_no_env_file_for_it(
        ws: Workspace, tmp_path: "os.PathLike[str]") -> None:
    """R1 (version-only) finds the root's tree good; before it publishes, R2 (--exact-pin v0.2.3) takes the lock,
    takes the env file away and begins rebuilding that tree.  R1's env file, written after that, must not stay
    while R2 builds: it would name a tree half replaced (a poller of R2's request would take it)."""
    assert ws.run().returncode == 0
    publishing, building = Barrier(ws.counter, "publishing"), Barrier(ws.counter, "building")
    # R1's last probe before it writes (other FlyDSL users: aiter) holds until R2's build began.
    write(os.path.join(str(tmp_path), "hold", "aiter", "__init__.py"),
          f"import os, time\nopen({publishing.reached!r}, 'w').close()\n"
          f"while not os.path.exists({publishing.go!r}):\n    time.sleep(0.05)\nraise ImportError('no aiter')\n")
    r1 = ws.popen("--json", PYTHONPATH=os.path.join(str(tmp_path), "hold"))
    r2 = None
    try:
        publishing.wait_reached()
        r2 = ws.popen("--json", FLYDSL_PIN="v0.2.3", FLYDSL_EXACT_PIN="1", FIXTURE_BUILD_HOOK=building.hook)
        building.wait_reached()
        assert not os.path.exists(ws.env_file)
        publishing.release()
        wait_until("R1 ends or waits for the lock R2 holds", lambda: r1.poll() is not None
                   or run_record_of(ws, r1.pid).get("step") == "lock", timeout=60)
        assert not os.path.exists(ws.env_file), "an env file for a tree another run is replacing"
    finally:
        publishing.release()
        building.release()
        out1, err1 = r1.communicate(timeout=120)
        if r2 is not None:
            r2.communicate(timeout=120)
    assert r1.returncode == 0, err1
    assert json.loads(out1)["version"] == "0.2.3", err1  # under the lock, the tree R2 finished answers R1
    assert_one_tree(ws)
