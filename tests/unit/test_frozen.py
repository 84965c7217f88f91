"""support/frozen.py: Frozen and Record behave as the dataclasses they replaced (``@dataclass(frozen=True)`` and
``@dataclass``), checked side by side against ``dataclasses`` itself on one shape of record: construction,
defaults and factories, equality, hash, repr, ``replace`` and ``asdict``; and they import no dataclasses."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

import ensure_flydsl
from ensure_flydsl.support.frozen import Frozen, Record, asdict, field, replace


class Inner(Frozen):
    a: int
    b: str = "b"


class FrozenShape(Frozen):
    name: str
    count: int = 0
    tags: List[str] = field(default_factory=list)
    inner: Optional[Inner] = None
    raw: bytes = field(default=b"", repr=False, compare=False)
    seen: Dict[str, int] = field(default_factory=dict, compare=False)


class RecordShape(Record):
    name: str
    count: int = 0
    tags: List[str] = field(default_factory=list)
    inner: Optional[Inner] = None
    raw: bytes = field(default=b"", repr=False, compare=False)
    seen: Dict[str, int] = field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True)
class DInner:
    a: int
    b: str = "b"


@dataclasses.dataclass(frozen=True)
class DFrozenShape:
    name: str
    count: int = 0
    tags: List[str] = dataclasses.field(default_factory=list)
    inner: Optional[DInner] = None
    raw: bytes = dataclasses.field(default=b"", repr=False, compare=False)
    seen: Dict[str, int] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass
class DRecordShape:
    name: str
    count: int = 0
    tags: List[str] = dataclasses.field(default_factory=list)
    inner: Optional[DInner] = None
    raw: bytes = dataclasses.field(default=b"", repr=False, compare=False)
    seen: Dict[str, int] = dataclasses.field(default_factory=dict, compare=False)


CASES = [((("x",), {}), "defaults"), ((("x", 2), {"tags": ["t"]}), "mixed"),
         (((), {"name": "y", "raw": b"r", "seen": {"k": 1}}), "keywords")]
PAIRS = [(FrozenShape, DFrozenShape), (RecordShape, DRecordShape)]


def mine_and_theirs(ours: type, theirs: type, args: tuple, kwargs: dict) -> tuple:
    inner = kwargs.pop("inner", None)
    a = ours(*args, **kwargs, inner=None if inner is None else Inner(inner))
    b = theirs(*args, **kwargs, inner=None if inner is None else DInner(inner))
    return a, b


@pytest.mark.parametrize("ours, theirs", PAIRS)
@pytest.mark.parametrize("call, _label", CASES)
def test_construction_equality_repr_and_asdict_are_dataclasses(ours: type, theirs: type, call: tuple,
                                                               _label: str) -> None:
    args, kwargs = call
    a, b = mine_and_theirs(ours, theirs, args, dict(kwargs, inner=3))
    assert repr(a).replace("Inner(", "DInner(").replace(ours.__name__, theirs.__name__) == repr(b)
    assert asdict(a) == dataclasses.asdict(b)
    again, _ = mine_and_theirs(ours, theirs, args, dict(kwargs, inner=3))
    assert (a == again) is (b == theirs(*args, **dict(kwargs, inner=DInner(3))))
    changed = replace(a, raw=b"other", seen={"z": 9})  # compare=False: still equal, as for dataclasses
    assert (changed == a) is (dataclasses.replace(b, raw=b"other", seen={"z": 9}) == b) is True
    assert (replace(a, count=7) == a) is (dataclasses.replace(b, count=7) == b) is False
    assert a.tags is not ours("x").tags  # a factory's default is made for each record


def test_frozen_is_hashable_and_refuses_assignment_record_is_neither() -> None:
    frozen, record = FrozenShape("x"), RecordShape("x")
    assert hash(Inner(1)) == hash(Inner(1, "b")) != hash(Inner(2))
    with pytest.raises(TypeError):
        hash(frozen)  # a list among its compared fields, as for a dataclass
    with pytest.raises(TypeError):
        hash(DFrozenShape("x"))
    with pytest.raises(AttributeError, match="frozen"):
        frozen.count = 3  # type: ignore[misc]
    with pytest.raises(AttributeError, match="frozen"):
        del frozen.count  # type: ignore[misc]
    record.count = 3
    assert record.count == 3 and record != RecordShape("x")
    with pytest.raises(TypeError):
        hash(record)
    with pytest.raises(TypeError):
        hash(DRecordShape("x"))  # as a dataclass that compares


def test_bad_arguments_are_type_errors() -> None:
    for args, kwargs in (((), {}), (("x", 1, [], None, b"", {}, "extra"), {}), (("x",), {"name": "y"}),
                         (("x",), {"nope": 1})):
        with pytest.raises(TypeError):
            FrozenShape(*args, **kwargs)
        with pytest.raises(TypeError):
            DFrozenShape(*args, **kwargs)


def test_records_of_other_classes_are_never_equal() -> None:
    assert FrozenShape("x") != RecordShape("x") and Inner(1) != DInner(1)
    assert FrozenShape("x") != "x"


def test_no_module_of_the_tool_imports_dataclasses() -> None:
    """Not one: the records are these (a status poll imports nothing that does; filelock, which a run takes,
    imports dataclasses itself since 4.x)."""
    package = os.path.dirname(os.path.abspath(ensure_flydsl.__file__))
    users = [os.path.relpath(os.path.join(folder, name), package) for folder, _dirs, names in os.walk(package)
             for name in names if name.endswith(".py")
             and re.search(r"^\s*(import dataclasses|from dataclasses import)", open(os.path.join(folder, name),
                                                                                  encoding="utf-8").read(), re.M)]
    assert users == []
    code = ("import sys, ensure_flydsl.cli.status, ensure_flydsl.cli.wait, ensure_flydsl.runs.timings; "
            "print('dataclasses' in sys.modules, 'inspect' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
