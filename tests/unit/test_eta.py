"""The ETA's model: the route's steps, the step's percent, the host's history read as outside data."""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from ensure_flydsl.errors import Plan, Stage
from ensure_flydsl.layout import host_cache_dir
from ensure_flydsl.runs.progress import HEARTBEAT_S, Pulse, estimate_eta, heartbeat_interval, overdue, step_left
from ensure_flydsl.runs.timings import (
    DEFAULT_SECONDS,
    HISTORY_KEEP,
    History,
    read_history,
    remember,
)
from ensure_flydsl.settings import load_settings
from ensure_flydsl.ways.context import likely_route

SOURCE = DEFAULT_SECONDS[Plan.SOURCE]
RELEASE = DEFAULT_SECONDS[Plan.RELEASE]


def test_the_default_seconds_of_each_route_are_unchanged() -> None:
    # One table per stage, a route's own figure for its fetch and verify: the figures each route had before.
    assert {plan.value: {str(s): v for s, v in table.items()} for plan, table in DEFAULT_SECONDS.items()} == {
        "source": {"probe": 5.0, "lock": 0.0, "fetch": 60.0, "requirements": 1.0, "fixes": 5.0, "llvm": 900.0,
                   "build": 300.0, "verify": 15.0, "publish": 1.0},
        "release": {"probe": 5.0, "lock": 0.0, "fetch": 15.0, "requirements": 1.0, "release": 20.0, "verify": 10.0,
                    "publish": 1.0},
        "cache": {"probe": 5.0, "lock": 0.0, "fetch": 15.0, "requirements": 1.0, "cache": 25.0, "verify": 10.0,
                  "publish": 1.0}}
    assert [list(table) for table in DEFAULT_SECONDS.values()] == [list(plan.stages) for plan in DEFAULT_SECONDS]


def test_the_eta_adds_up_the_steps_of_the_route_it_takes() -> None:
    # Half-way through the build (expected 300 s): 150 s left, plus verify and publish.
    assert estimate_eta(Stage.BUILD, 100.0, 50.0, SOURCE, [], Plan.SOURCE) == 150.0 + SOURCE[Stage.VERIFY] + 1.0
    # No percent: the step's expected length less what has passed, then every later step of the route.
    assert estimate_eta(Stage.LLVM, 100.0, None, SOURCE, [], Plan.SOURCE) == (
        800.0 + SOURCE[Stage.BUILD] + SOURCE[Stage.VERIFY] + SOURCE[Stage.PUBLISH])
    # A release run never adds up LLVM's and the build's minutes: from its first step, seconds.
    release = estimate_eta(Stage.PROBE, 0.0, None, RELEASE, [], Plan.RELEASE)
    assert release is not None and release < 60
    assert release == sum(RELEASE.values())
    # A run `start` announced, its worker not begun yet: the whole route.
    assert estimate_eta(Stage.STARTING, 0.0, None, RELEASE, [], Plan.RELEASE) == sum(RELEASE.values())
    # Steps that ended are not counted again (the second probe, after the lock).
    assert estimate_eta(Stage.PROBE, 0.0, None, RELEASE, ["probe", "lock"], Plan.RELEASE) == sum(
        RELEASE.values()) - RELEASE[Stage.LOCK]
    # The route not known yet: no ETA (never the source build's twenty minutes for a release run).
    assert estimate_eta(Stage.PROBE, 0.0, None, SOURCE, [], None) is None
    assert estimate_eta(None, 0.0, None, SOURCE, [], Plan.SOURCE) is None


def test_within_a_step_the_eta_moves_with_its_percent() -> None:
    # A step that went fast so far (the fixture's): the old model's elapsed * (100 - p) / p hardly moved,
    # the later steps' defaults dominated (5m16s at 25 % and at 100 %).
    etas = [estimate_eta(Stage.LLVM, 1.0 + i, p, SOURCE, [], Plan.SOURCE) for i, p in enumerate((25.0, 50.0, 75.0))]
    assert etas[0] > etas[1] > etas[2]  # type: ignore[operator]
    assert [step_left(900.0, 1.0, p) for p in (25.0, 50.0, 75.0, 100.0)] == [675.0, 450.0, 225.0, 0.0]
    # A step that outlasts its expected length: what it has taken so far is its length at least.
    assert step_left(100.0, 400.0, 50.0) == 200.0
    assert step_left(100.0, 30.0, None) == 70.0
    # Past it, with no percent or at 100 % (LLVM's silent final link): rescaled to a quarter of its time so far,
    # never 0, and the heartbeat says how far past its usual time the step is.
    assert step_left(100.0, 400.0, None) == 100.0 and step_left(100.0, 400.0, 100.0) == 100.0
    assert step_left(0.0, 2.0, None) == 1.0
    assert overdue(SOURCE, Stage.LLVM, SOURCE[Stage.LLVM] + 40.0) == 40.0
    assert overdue(SOURCE, Stage.LLVM, 10.0) is None and overdue({}, Stage.LLVM, 10.0) is None
    line = Pulse(step=Stage.LLVM, percent=None, elapsed_s=999.0, eta_s=250.0, run_id="r1", pid=7, overdue_s=40.0).line()
    assert ", ETA 4m10s, overdue 40s (run r1, pid 7)" in line, line


def settings(**env: str) -> Any:
    return load_settings({}, {"FLYDSL_ROOT": "/tmp/eta-unit/FlyDSL", **env})


def test_the_likeliest_route_before_a_provider_takes_one(tmp_path: "os.PathLike[str]") -> None:
    cache = os.path.join(str(tmp_path), "cache")
    assert likely_route(settings(FLYDSL_STRATEGY="release")) == Plan.RELEASE
    assert likely_route(settings(FLYDSL_STRATEGY="release", FLYDSL_PIN="0.2.2")) == Plan.RELEASE
    assert likely_route(settings(FLYDSL_PIN="v0.2.2")) == Plan.RELEASE  # auto, a release tag
    assert likely_route(settings(FLYDSL_PIN="v0.2.2", FLYDSL_STRATEGY="source")) == Plan.SOURCE
    assert likely_route(settings(FLYDSL_STRATEGY="source", FLYDSL_CACHE=cache)) == Plan.CACHE
    # auto with a commit: a release's commit or not, only the refs tell; until then no route.
    assert likely_route(settings()) is None
    assert likely_route(settings(), release_commit=True) == Plan.RELEASE
    assert likely_route(settings(), release_commit=False) == Plan.SOURCE
    assert likely_route(settings(FLYDSL_CACHE=cache), release_commit=False) == Plan.CACHE
    assert likely_route(settings(FLYDSL_STRATEGY="source"), release_commit=True) == Plan.SOURCE


def test_history_gives_each_route_its_own_medians() -> None:
    history = History()
    for seconds in (4.0, 6.0, 100.0):
        history = history.adding(Plan.RELEASE, {Stage.RELEASE: seconds, Stage.VERIFY: 2.0})
    expected = history.expected(Plan.RELEASE)
    assert expected[Stage.RELEASE] == 6.0 and expected[Stage.VERIFY] == 2.0
    assert expected[Stage.FETCH] == RELEASE[Stage.FETCH]  # not learnt yet: the default
    assert history.expected(Plan.SOURCE) == SOURCE  # another route's runs say nothing of this one
    # A step of another route (a release tried before the build) is not learnt as the build's.
    built = History().adding(Plan.SOURCE, {Stage.RELEASE: 3.0, Stage.BUILD: 9.0})
    assert built.routes[Plan.SOURCE] == {Stage.BUILD: (9.0,)}
    for i in range(HISTORY_KEEP + 3):
        history = history.adding(Plan.RELEASE, {Stage.RELEASE: float(i)})
    assert len(history.routes[Plan.RELEASE][Stage.RELEASE]) == HISTORY_KEEP
    assert History.from_json(json.loads(json.dumps(history.to_json()))) == history


GOOD: Dict[str, object] = {"version": 1, "routes": {"release": {"release": [4.0, 6], "verify": [2.5]}}}


@pytest.mark.parametrize("data", [
    None, [], "x", {}, {"routes": {}}, {**GOOD, "version": 2}, {**GOOD, "version": True}, {**GOOD, "version": "1"},
    {**GOOD, "routes": []}, {**GOOD, "routes": {"release": []}}, {**GOOD, "routes": {"release": {"release": 4}}},
    {**GOOD, "routes": {"release": {"release": ["4"]}}}, {**GOOD, "routes": {"release": {"release": [True]}}},
    {**GOOD, "routes": {"release": {"release": [-1.0]}}}, {**GOOD, "routes": {"release": {"release": [1e12]}}},
    {**GOOD, "routes": {"nightly": {"build": "x"}}},
])
def test_a_history_that_is_not_one_reads_as_none(data: object) -> None:
    assert History.from_json(data) is None


def test_what_this_version_does_not_know_is_left_out() -> None:
    data = {"version": 1, "routes": {"release": {"release": [4.0], "sign": [1.0]}, "nightly": {"build": [9.0]}}}
    history = History.from_json(data)
    assert history is not None and history.routes == {Plan.RELEASE: {Stage.RELEASE: (4.0,)}}


@pytest.mark.parametrize("content", [b"", b"{", b'{"version": 1, "routes": {"release": {"release": [1',
                                     b"\xff\xfe", b"[" * 100000, b"null", b'{"version": 1, "routes": 5}'])
def test_a_torn_or_garbage_file_reads_as_no_history(tmp_path: "os.PathLike[str]", content: bytes) -> None:
    host = os.path.join(str(tmp_path), "host")
    os.makedirs(host)
    with open(os.path.join(host, "history.json"), "wb") as handle:
        handle.write(content)
    assert read_history(host) == History()
    # The next run's durations replace it (it was no history of anybody's).
    assert remember(host, Plan.CACHE, {Stage.CACHE: 3.0})
    assert read_history(host).expected(Plan.CACHE)[Stage.CACHE] == 3.0


def test_a_newer_versions_history_is_read_as_none_and_left_as_it_is(tmp_path: "os.PathLike[str]") -> None:
    host = str(tmp_path)
    path = os.path.join(host, "history.json")
    newer = json.dumps({"version": 2, "steps": {"build": [1.0]}})
    with open(path, "w") as handle:
        handle.write(newer)
    assert read_history(host) == History()
    assert remember(host, Plan.SOURCE, {Stage.BUILD: 5.0}) is False
    with open(path) as handle:
        assert handle.read() == newer


def test_a_history_that_cannot_be_written_costs_only_the_eta(tmp_path: "os.PathLike[str]") -> None:
    blocker = os.path.join(str(tmp_path), "a-file")
    open(blocker, "w").close()
    assert remember(os.path.join(blocker, "ensure-flydsl"), Plan.SOURCE, {Stage.BUILD: 5.0}) is False
    assert remember(None, Plan.SOURCE, {Stage.BUILD: 5.0}) is False
    assert read_history(None) == History()


def test_the_host_folder_is_the_users_cache_folder() -> None:
    assert host_cache_dir({"XDG_CACHE_HOME": "/x/cache", "HOME": "/h"}) == "/x/cache/ensure-flydsl"
    assert host_cache_dir({"HOME": "/h"}) == "/h/.cache/ensure-flydsl"
    # The XDG rule: a relative XDG_CACHE_HOME is ignored.
    assert host_cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == "/h/.cache/ensure-flydsl"
    assert host_cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "also-rel"}) is None


def test_the_heartbeat_interval_is_30_s_unless_a_test_shortens_it() -> None:
    assert heartbeat_interval({}) == HEARTBEAT_S == 30.0
    assert heartbeat_interval({"ENSURE_FLYDSL_HEARTBEAT_S": "0.5"}) == 0.5
    for bad in ("", "x", "0", "-1", "nan", "inf"):
        assert heartbeat_interval({"ENSURE_FLYDSL_HEARTBEAT_S": bad}) == HEARTBEAT_S
