"""Moved to support/processes.py; kept until cli/main.py imports unblock_stop_signals from there."""

from ensure_flydsl.support.processes import unblock_stop_signals as unblock_stop_signals
