"""The env file quotes its values as shlex.quote does (runs/markers.py: _quote, which the warm call uses so as
not to import shlex): for any text, the same quoted word."""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from ensure_flydsl.runs.markers import _quote, render_env_sh

CASES = ["", "a", "/opt/flydsl/FlyDSL", "with space", "it's", "''", "$HOME", "a\nb", "é", "ß", "٣", "x\x00y",
         "%+,-./0123456789:=@_", "~user", "*", "a'b'c", "-", "\\"]


def test_the_listed_texts_are_quoted_as_shlex_quotes_them() -> None:
    for text in CASES:
        assert _quote(text) == shlex.quote(text), text


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30))
def test_any_text_is_quoted_as_shlex_quotes_it(text: str) -> None:
    assert _quote(text) == shlex.quote(text)


def test_the_env_file_quotes_every_value_with_it() -> None:
    text = render_env_sh("/r o/o't", ["/r o/o't", "/p$q"], "/s h", True)
    assert "export FLYDSL_ROOT='/r o/o'\"'\"'t'" in text
    assert f"export FLYDSL_SHIM_DIR={shlex.quote('/s h')}" in text
    assert f"for _ensure_flydsl_d in {shlex.quote('/r o/o' + chr(39) + 't')} {shlex.quote('/p$q')}; do" in text
