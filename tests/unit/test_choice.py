"""support/choice.py: the warm path's closed sets behave as the ``str``-mixed enums they replaced (the same
values, one object per member, equal to and written as the value), without importing enum."""

from __future__ import annotations

import copy
import json
import os
import pickle
import subprocess
import sys
from typing import ClassVar

import pytest

import ensure_flydsl
from ensure_flydsl.result import Action, How
from ensure_flydsl.setting_values import STRATEGIES, Strategy, parse_strategy
from ensure_flydsl.support.choice import Choice


class Color(Choice):
    RED: ClassVar[Color]
    DARK_BLUE: ClassVar[Color]
    _hidden: ClassVar[int] = 3


def test_each_annotated_name_is_a_member_whose_value_is_the_name_in_lower_case() -> None:
    assert tuple(Color) == (Color.RED, Color.DARK_BLUE)
    assert [m.value for m in tuple(Color)] == ["red", "dark-blue"]
    assert [m.name for m in tuple(Color)] == ["RED", "DARK_BLUE"]
    assert Color._hidden == 3 and "_hidden" not in [m.name for m in tuple(Color)] and len(Color) == 2
    assert Color.RED in Color and "dark-blue" in Color and "blue" not in Color and 3 not in Color


def test_a_member_is_its_value_as_text() -> None:
    assert Color.DARK_BLUE == "dark-blue" and hash(Color.DARK_BLUE) == hash("dark-blue")
    assert str(Color.RED) == "red" and type(str(Color.RED)) is str and type(Color.RED.value) is str
    assert f"{Color.RED}" == "red" and "%s" % Color.RED == "red"
    assert json.dumps({"c": Color.DARK_BLUE, Color.RED: 1}) == '{"c": "dark-blue", "red": 1}'
    assert repr(Color.DARK_BLUE) == "<Color.DARK_BLUE: 'dark-blue'>"
    assert isinstance(Color.RED, Color) and isinstance(Color.RED, str)


def test_a_value_gives_the_one_member_and_nothing_else_is_one() -> None:
    assert Color("red") is Color.RED and Color(Color.RED) is Color.RED
    assert copy.deepcopy(Color.RED) is Color.RED and pickle.loads(pickle.dumps(Color.RED)) is Color.RED
    for bad in ("RED", "dark_blue", "", ["red"], None):
        with pytest.raises(ValueError, match="is not a valid Color"):
            Color(bad)  # type: ignore[arg-type]


def test_two_sets_keep_their_own_members() -> None:
    class Other(Choice):
        RED: ClassVar[Other]

    assert tuple(Other) == (Other.RED,) and type(Other("red")) is Other and type(Color("red")) is Color
    assert tuple(Color) == (Color.RED, Color.DARK_BLUE)


def test_the_tools_sets_have_the_values_their_enums_had() -> None:
    """The values are what the env file's twin, the JSON results and the docs say: unchanged."""
    assert STRATEGIES == ("auto", "source", "release", "reuse-only")
    assert parse_strategy("FLYDSL_STRATEGY", "reuse-only") is Strategy.REUSE_ONLY
    assert [h.value for h in How] == ["reused", "built", "released", "cached"]
    assert [a.value for a in Action] == ["warm", "verified", "reused", "provisioned"]


def test_the_sets_import_no_enum() -> None:
    code = ("import sys, ensure_flydsl.result, ensure_flydsl.setting_values; "
            "print(sorted(m for m in ('enum', 'functools', 'collections') if m in sys.modules))")
    top = os.path.dirname(os.path.dirname(os.path.abspath(ensure_flydsl.__file__)))
    out = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": top}, stdout=subprocess.PIPE,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"
