"""Each command's handler, named by the command table (cli/commands.py: ``Command.run``, ``Command.plain``): it
imports its command's module when it runs.  Apart from the table, so that the warm call's dispatch builds no table
and the table imports no command (help and completion read it)."""

from __future__ import annotations

import argparse
import json
from typing import Dict

from ensure_flydsl.cli.cache import cache_command
from ensure_flydsl.cli.clean import clean
from ensure_flydsl.cli.completion import completion
from ensure_flydsl.cli.doctor import doctor
from ensure_flydsl.cli.ensure import ensure_command
from ensure_flydsl.cli.env import show_env
from ensure_flydsl.cli.help import show_help
from ensure_flydsl.cli.skill import skill
from ensure_flydsl.cli.start import start
from ensure_flydsl.cli.stats import stats
from ensure_flydsl.cli.status import status
from ensure_flydsl.cli.store import store_command
from ensure_flydsl.cli.verify import verify
from ensure_flydsl.cli.wait import wait
from ensure_flydsl.settings import Settings
from ensure_flydsl.support.report import Reporter


def _ensure(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return ensure_command(settings, reporter, environ, as_json=args.json, warm_key=args.warm_key)


def _env(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return show_env(settings, args.format, environ, as_json=args.json)


def _verify(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return verify(settings, environ, as_json=args.json)


def _clean(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    cleaned = clean(settings, reporter.say)
    for line in cleaned.lines():
        reporter.say(line)
    if args.json:
        print(json.dumps(cleaned.to_json(settings), sort_keys=True))
    return 0


def _start(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return start(settings, environ, reporter)


def _wait(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return wait(settings, reporter, timeout=args.timeout, heartbeat=args.heartbeat, as_json=args.json)


def _status(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return status(settings, as_json=args.json)


def _doctor(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return doctor(settings, environ, as_json=args.json)


def _cache(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return cache_command(settings, args.cache_action, max_size=getattr(args, "max_size", None),
                         as_json=getattr(args, "json", False), say=reporter.say, names=getattr(args, "names", ()),
                         out=getattr(args, "out", None), key=getattr(args, "key", None))


def _stats(args: argparse.Namespace, reporter: Reporter, environ: Dict[str, str]) -> int:
    return stats(args, environ)


def _store(args: argparse.Namespace, settings: Settings, reporter: Reporter, environ: Dict[str, str]) -> int:
    return store_command(settings, environ, args.store_action, max_size=getattr(args, "max_size", None),
                         as_json=getattr(args, "json", False), say=reporter.say)


def _skill(args: argparse.Namespace, reporter: Reporter, environ: Dict[str, str]) -> int:
    return skill(args.dir, force=args.force, wheels=args.wheels, environ=environ, reporter=reporter,
                 as_json=args.json)


def _help(args: argparse.Namespace, reporter: Reporter, environ: Dict[str, str]) -> int:
    return show_help(args.topic)


def _completion(args: argparse.Namespace, reporter: Reporter, environ: Dict[str, str]) -> int:
    return completion(args.shell)
