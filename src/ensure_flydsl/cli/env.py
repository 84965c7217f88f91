"""``ensure-flydsl env``: print the env file, or its JSON twin."""

from __future__ import annotations

import sys

from ensure_flydsl.settings import Settings

NO_ENV_FILE = 1


def show_env(settings: Settings, fmt: str) -> int:
    path = settings.env_json if fmt == "json" else settings.env_file
    try:
        with open(path) as handle:
            sys.stdout.write(handle.read())
    except FileNotFoundError:
        print(f"ensure-flydsl: no env file at {path}; run `ensure-flydsl` (or `ensure-flydsl start`) first",
              file=sys.stderr)
        return NO_ENV_FILE
    return 0
