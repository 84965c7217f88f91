"""The tool's one entry (the installed command, ``python -m ensure_flydsl``, the GEAK folder's launcher): the
front door's warm answer (warm.py), else the command line."""

from __future__ import annotations

import os
import sys

from ensure_flydsl.warm import answer, interrupted_at_start


def main(argv: list[str] | None = None, *, launcher: list[str] | None = None) -> int:
    """``launcher``: how the GEAK folder runs this copy of the tool again (its worker, its watchdog)."""
    try:  # until the handler is in place: the front door's answer, and signal's import (its enums are classes)
        args = sys.argv[1:] if argv is None else list(argv)
        said = answer(args, dict(os.environ))
        if said is None:
            import signal  # on a miss only, like the command line it hands off to

            # An ignored SIGINT (`cmd &` from a script) stays ignored; cli/main.py puts the default back.
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, interrupted_at_start)
    except (KeyboardInterrupt, RuntimeError) as exc:
        if not isinstance(exc, KeyboardInterrupt) and not isinstance(exc.__cause__, KeyboardInterrupt):
            raise
        interrupted_at_start()
    if said is None:
        from ensure_flydsl.cli.main import main as command_line
        from ensure_flydsl.support.launcher import set_launcher

        if launcher is not None:
            set_launcher(launcher)
        return command_line(args)
    for stream, text in ((sys.stderr, said[1]), (sys.stdout, said[0])):
        try:
            if stream is not None:  # None: closed from the start (`cmd >&-`), nobody to tell
                stream.write(text)
                stream.flush()
        except BrokenPipeError:  # the reader stopped reading (`| head -1`): nobody's failure
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
