"""The warm call reads the env file's twin without importing json (support/files.py: _loads): what it reads is
what ``json.loads`` reads, and what it refuses (ValueError, or RecursionError for nesting too deep) json refuses,
for any text: JSON texts, their near misses, and arbitrary characters."""

from __future__ import annotations

import json
from typing import Callable, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st

from ensure_flydsl.support.files import _loads

_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20)
_SPACE = st.text(alphabet=" \t\n\r\x0b\x0c\xa0\ufeff", max_size=3)
_EDITS = st.sampled_from(["", ",", "]", "}", "x", "\x01", "\\", '"', "{}", "01", "-", "1.", "NaN", "\ufeff"])


def _outcome(read: Callable[[str], object], text: str) -> Tuple[str, str]:
    try:
        return "read", repr(read(text))
    except RecursionError:
        return "too deep", ""
    except ValueError:
        return "refused", ""


CASES = ["", " ", "{}", ' \n{"a": [1, 2.5, -0, 1e400, NaN, Infinity, -Infinity, null, true, false, "\\u00e9"]}\t\r\n',
         "\ufeff{}", "{} x", "{}{}", "[1,]", '{"a":"\x01"}', '"\\ud800"', "nan", '{"a":1,"a":2}', "\x0b{}", "{}\x0c",
         "\xa0{}", '{"x": 01}', "-", "1.", "[" * 100000 + "]" * 100000, '{"a": 1 , "b" : [ ] }']


def test_the_listed_texts_read_as_json_reads_them() -> None:
    for text in CASES:
        assert _outcome(_loads, text) == _outcome(json.loads, text), text[:60]


@settings(max_examples=300, deadline=None)
@given(_JSON, _SPACE, _SPACE, _EDITS, st.integers(min_value=0, max_value=200))
def test_json_and_near_misses_read_as_json_reads_them(value: object, before: str, after: str, edit: str,
                                                       at: int) -> None:
    text = before + json.dumps(value, allow_nan=True) + after
    assert _outcome(_loads, text) == _outcome(json.loads, text)
    edited = text[:at] + edit + text[at:]
    assert _outcome(_loads, edited) == _outcome(json.loads, edited)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_reads_as_json_reads_it(text: str) -> None:
    assert _outcome(_loads, text) == _outcome(json.loads, text)
