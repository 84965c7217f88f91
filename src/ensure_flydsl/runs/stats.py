"""Moved to runs/timings.py; kept until cli/stats.py imports these names from there."""

from ensure_flydsl.runs.timings import Summary as Summary
from ensure_flydsl.runs.timings import summarize as summarize
