"""The warm call's and the polls' command lines are read without argparse (cli/main.py: fast_args); what they give
must be what the command's parser gives for them, and every other form goes to the parser."""

from __future__ import annotations

from typing import List

import pytest

from ensure_flydsl.cli.main import fast_args, parse
from ensure_flydsl.cli.parser import parse_args

FAST = [[], ["--json"], ["status"], ["status", "--json"], ["wait"], ["wait", "--json"], ["wait", "--timeout", "0"],
        ["wait", "--timeout", "540"], ["wait", "--timeout", "0", "--json"], ["wait", "--json", "--timeout", "1.5"],
        ["wait", "--timeout", "999999999.5"], ["wait", "--timeout", "1e3"], ["wait", "--timeout", "１"]]
# Each needs the parser: another flag, a setting, a value the parser's check refuses (the parser says why).
PARSED = [["--json", "-q"], ["-v"], ["status", "--json", "--json"], ["status", "--timeout", "1"],
          ["status", "--root", "/x"], ["wait", "--timeout"], ["wait", "--timeout", "-1"],
          ["wait", "--timeout", "nan"], ["wait", "--timeout", "1000000000"], ["wait", "--timeout", "inf"],
          ["wait", "--timeout", "0", "--timeout", "1"], ["wait", "--heartbeat", "5"], ["wait", "--json", "-q"],
          ["env"], ["start"], ["statuss"]]


@pytest.mark.parametrize("argv", FAST)
def test_the_fast_forms_read_as_the_parser_reads_them(argv: List[str]) -> None:
    fast, full = vars(parse(argv)), vars(parse_args(argv))
    assert fast == {name: full[name] for name in fast}
    assert all(value is None for name, value in full.items() if name not in fast)  # every setting left out


@pytest.mark.parametrize("argv", PARSED)
def test_any_other_form_goes_to_the_parser(argv: List[str]) -> None:
    assert fast_args(argv) is None


def test_a_fast_form_is_no_namespace_and_another_is() -> None:
    assert type(parse(["--json", "-q"])).__name__ == "Namespace"
    assert type(parse(["status"])).__name__ != "Namespace" and parse(["status"]).command == "status"
