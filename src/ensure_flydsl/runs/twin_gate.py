"""Moved to runs/markers.py; kept until cli/ and pipeline/ import these names from there."""

from ensure_flydsl.runs.markers import installed as installed
from ensure_flydsl.runs.markers import installed_line as installed_line
from ensure_flydsl.runs.markers import installed_twin as installed_twin
from ensure_flydsl.runs.markers import twin_gap as twin_gap
