"""Moved to runs/liveness.py; kept until cli/main.py imports watch from there."""

from ensure_flydsl.runs.liveness import watch as watch
