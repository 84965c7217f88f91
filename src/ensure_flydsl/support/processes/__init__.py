"""Every process the tool starts is started and stopped here: short commands (``cmd_output``, ``run_captured``),
a build script streamed line by line (``stream_command``), network commands under a silence watchdog
(``watched_output``), long-lived helpers in a group of their own (``spawn``), and the stopping of a process
group (``kill_group``, ``stop_group``, ``kill_and_reap``, ``end_leftovers``)."""

from ensure_flydsl.support.processes.commands import (
    CommandFailed,
    cmd_output,
    end_leftovers,
    kill_and_reap,
    kill_group,
    run_captured,
    spawn,
    spawn_text,
    stop_group,
    tail_lines,
)
from ensure_flydsl.support.processes.streamed import DRAIN_S, LEFTOVER_GRACE_S, MAX_LINE_BYTES, stream_command
from ensure_flydsl.support.processes.watched import (
    NETWORK_SILENCE_S,
    Silent,
    heartbeat,
    network_silence_s,
    set_heartbeat,
    waiting_line,
    watched_output,
)
from ensure_flydsl.support.stop_signals import STOP_SIGNAL_NAMES, stop_signals_blocked, unblock_stop_signals

__all__ = [
    "CommandFailed", "DRAIN_S", "LEFTOVER_GRACE_S", "MAX_LINE_BYTES", "NETWORK_SILENCE_S", "STOP_SIGNAL_NAMES",
    "Silent", "cmd_output", "end_leftovers", "heartbeat", "kill_and_reap", "kill_group", "network_silence_s",
    "run_captured", "set_heartbeat", "spawn", "spawn_text", "stop_group", "stop_signals_blocked", "stream_command",
    "tail_lines", "unblock_stop_signals", "waiting_line", "watched_output",
]
