"""The one Strategy table (issue 27, item 1) and the concepts that are one type each (item 2): the table says
what every strategy's branching was when it was spelled by hand, the doctor has a prediction for every way
the table names, no module compares the strategy to a string, and the enums read and write the values the
files and JSON objects always held."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from ensure_flydsl.errors import Stage
from ensure_flydsl.runs.records import RunRecord, RunState
from ensure_flydsl.settings import Request, Settings, Strategy, load_settings
from ensure_flydsl.source.root import RootKind, classify_root
from ensure_flydsl.ways import STRATEGY, Way, demands, falls_back, provisioning, provisions, tries
from ensure_flydsl.ways.checks import CheckStatus, passed
from ensure_flydsl.ways.table import WAYS, ways_for

SRC = Path(__file__).resolve().parents[2] / "src" / "ensure_flydsl"


@pytest.mark.parametrize("strategy", list(Strategy))
def test_the_table_says_what_each_strategy_did_by_hand(strategy: Strategy) -> None:
    name = strategy.value
    # The conditions provision.py and doctor/diagnose.py spelled before the table (issue 27's "why").
    assert tries(strategy, Way.SOURCE) == (name in ("auto", "source"))
    assert tries(strategy, Way.RELEASE) == (name in ("auto", "release"))
    assert tries(strategy, Way.CACHE) == (name in ("auto", "source"))
    assert demands(strategy, Way.RELEASE) == (name == "release")
    assert falls_back(strategy) == (name == "auto")
    assert provisions(strategy) == (name != "reuse-only")
    assert STRATEGY[strategy][0] is Way.REUSE  # every strategy reuses a good tree first
    order = provisioning(strategy)
    assert list(order) == sorted(order, key=[Way.RELEASE, Way.CACHE, Way.SOURCE].index)  # the quick ways first


def test_every_way_the_table_names_provides_and_predicts() -> None:
    named = {way for ways in STRATEGY.values() for way in ways} - {Way.REUSE}
    assert set(WAYS) == named | {Way.STORE}
    assert all(WAYS[way].way is way and callable(WAYS[way].predict) for way in WAYS)


@pytest.mark.parametrize("strategy", list(Strategy))
def test_the_run_and_the_doctor_read_the_ways_in_one_order(strategy: Strategy) -> None:
    assert [way.way for way in ways_for(strategy)] == [Way.STORE, *provisioning(strategy)]


# A strategy compared with a literal: `strategy == "auto"`, `settings.strategy in ("auto", "source")`, ...
_COMPARED = re.compile(r"strategy\s*(==|!=|\bin\b|\bnot in\b)\s*[\"'(]")


def test_no_module_compares_the_strategy_to_a_string() -> None:
    found = [f"{path.relative_to(SRC)}:{n}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if _COMPARED.search(line)]
    assert not found, "ask ways.STRATEGY (tries, provisions, demands, falls_back) instead:\n" + "\n".join(found)


def test_the_strategy_setting_is_the_enum_and_shows_its_value() -> None:
    settings = load_settings({"strategy": "reuse-only"}, {})
    assert settings.strategy is Strategy.REUSE_ONLY
    assert f"{settings.strategy}" == "reuse-only" and str(settings.strategy) == "reuse-only"
    request = settings.request()
    assert request.strategy is Strategy.REUSE_ONLY
    written = request.to_json()
    assert type(written["strategy"]) is str and json.loads(json.dumps(written))["strategy"] == "reuse-only"
    assert Request.from_json(json.loads(json.dumps(written))) == request  # a twin's request read back answers it


def test_a_run_record_reads_back_its_state_as_the_enum() -> None:
    record = RunRecord(run_id="r1", root="/x/FlyDSL", request=Settings(pin="v0.2.3").request(), kind="blocking", pid=1,
                       pid_start="1", host="h", state=RunState.FAILED, started=1.0, updated=1.0, log="/x/log",
                       fail_marker="/x/failed")
    written = json.loads(json.dumps(record.to_json()))
    assert written["state"] == "failed"
    read = RunRecord.from_json(written)
    assert read is not None and read.state is RunState.FAILED
    assert RunRecord.from_json({**written, "state": "paused"}) is None  # a value no run writes


def test_the_root_kind_and_the_check_status_show_their_values(tmp_path: Path) -> None:
    absent = classify_root(os.path.join(str(tmp_path), "FlyDSL"), "file:///nowhere")
    assert absent.kind is RootKind.ABSENT and f"{absent.kind}" == "absent"
    (tmp_path / "file").write_text("x")
    foreign = classify_root(str(tmp_path / "file"), "file:///nowhere")
    assert foreign.kind is RootKind.FOREIGN
    check = passed("git", "git 2.43", Stage.FETCH)
    assert check.status is CheckStatus.OK
    assert json.loads(json.dumps(dataclasses.asdict(check)))["status"] == "ok" and check.status.upper() == "OK"
