"""The env file quotes every value as shlex.quote does: sourcing it never runs code that came from a path."""

from __future__ import annotations

import shlex

from ensure_flydsl.runs.markers import EnvFile


def test_the_env_file_quotes_every_value_with_it() -> None:
    text = EnvFile("/r o/o't", ("/r o/o't", "/p$q"), "/s h", True).text()
    assert "export FLYDSL_ROOT='/r o/o'\"'\"'t'" in text
    assert f"export FLYDSL_SHIM_DIR={shlex.quote('/s h')}" in text
    assert f"for _ensure_flydsl_d in {shlex.quote('/r o/o' + chr(39) + 't')} {shlex.quote('/p$q')}; do" in text
