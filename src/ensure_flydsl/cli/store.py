"""``ensure-flydsl store list [--json]`` and ``store prune --max-size SIZE``: the host store (FLYDSL_STORE, by
default in the user's cache folder) and the roots that use its trees.  Housekeeping: a store that is off or
cannot be opened is bad input here (exit 64)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Mapping, Optional

from ensure_flydsl import layout
from ensure_flydsl.errors import ExitCode
from ensure_flydsl.result import result_object
from ensure_flydsl.settings import Settings
from ensure_flydsl.trees.local import HostStore
from ensure_flydsl.trees.remote import format_size, parse_size


def store_path(settings: Settings, environ: Mapping[str, str]) -> Optional[str]:
    if settings.store == "off":
        return None
    if settings.store is not None:
        return settings.store
    host = layout.host_cache_dir(environ)
    return layout.default_store_dir(host) if host is not None else None


def store_command(settings: Settings, environ: Mapping[str, str], action: str, *, max_size: Optional[str],
                  as_json: bool, say: Callable[[str], None]) -> int:
    path = store_path(settings, environ)
    if path is None:
        return _refuse("no host store: FLYDSL_STORE is off (or neither XDG_CACHE_HOME nor HOME names a folder)")
    if action == "prune":
        if max_size is None:
            return _refuse("store prune needs --max-size SIZE: bytes, or a number with K, M, G or T (e.g. 2G)")
        try:
            limit = parse_size(max_size)
        except ValueError:
            return _refuse(f"--max-size={max_size!r} is not allowed: bytes, or a number with K, M, G or T (e.g. 2G)")
    if not os.path.isdir(path):
        if action == "list":
            print(json.dumps(result_object(ok=True, exit_code=0, reason="no tree", store=path, trees=[]))
                  if as_json else f"the host store {path} holds no tree")
        return 0
    try:
        store = HostStore.open(path)
        if action == "prune":
            removed = store.prune(limit)
            for tree in removed:
                say(f"removed the tree {tree.key[:12]} ({format_size(tree.size)}, {tree.how}, "
                    f"{(tree.commit or '?')[:12]}){': ' + tree.problem if tree.problem else ''}")
            left = sum(t.size for t in store.list())
            say(f"the host store {path} holds {format_size(left)} (at most {format_size(limit)} asked; "
                "trees a root uses are kept)")
            return 0
        return _list(store, as_json)
    except OSError as exc:
        return _refuse(f"the host store {path} cannot be used: {exc}")


def _list(store: HostStore, as_json: bool) -> int:
    trees = store.list()
    if as_json:
        print(json.dumps(result_object(ok=True, exit_code=0, reason=f"{len(trees)} trees", store=store.path,
                                       trees=[t.to_json() for t in trees]), sort_keys=True))
        return 0
    print(f"the host store {store.path}: {len(trees)} trees, {format_size(sum(t.size for t in trees))}")
    for t in trees:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(t.last_used))
        users = ", ".join(t.used_by) or "no root"
        print(f"{t.key[:12]}  {format_size(t.size):>10}  {t.how or '?':8} {(t.commit or '?')[:12]}  {t.abi or '?'}  "
              f"last linked {when}  used by {users}{'  DAMAGED: ' + t.problem if t.problem else ''}")
    return 0


def _refuse(message: str) -> int:
    print(f"ensure-flydsl: {message}", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)
