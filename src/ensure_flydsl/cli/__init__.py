"""The command line: cli/main.py parses and dispatches to a module per command, handing it a :class:`Call`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Dict, List, Optional

from ensure_flydsl.support.report import Reporter


@dataclass
class Call:
    """One command line: its arguments, the variables, where it reports and how."""

    args: argparse.Namespace
    environ: Dict[str, str]
    reporter: Reporter
    as_json: bool
    warm_key: Optional[List[str]] = None  # the front door's key, for `ensure` (warm.py)
