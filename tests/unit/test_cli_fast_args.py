"""The warm call's command lines are read without argparse (cli/main.py: parse); what they give must be what the
ensure command's parser gives for them."""

from __future__ import annotations

import pytest

from ensure_flydsl.cli.main import parse
from ensure_flydsl.cli.parser import parse_args


@pytest.mark.parametrize("argv", [[], ["--json"]])
def test_the_fast_forms_read_as_the_parser_reads_them(argv: list) -> None:
    fast, full = vars(parse(argv)), vars(parse_args(argv))
    assert fast == {name: full[name] for name in fast}
    assert all(value is None for name, value in full.items() if name not in fast)  # every setting left out


def test_any_other_form_goes_to_the_parser() -> None:
    assert type(parse(["--json", "-q"])).__name__ == "Namespace"
    assert parse(["status"]).command == "status"
