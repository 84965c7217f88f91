"""Moved to runs/progress.py; kept until cli/, pipeline/ and ways/ import these names from there."""

from ensure_flydsl.runs.progress import Heartbeat as Heartbeat
from ensure_flydsl.runs.progress import Pulse as Pulse
from ensure_flydsl.runs.progress import heartbeat_interval as heartbeat_interval
from ensure_flydsl.runs.progress import say_pulse as say_pulse
