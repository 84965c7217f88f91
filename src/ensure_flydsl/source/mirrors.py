"""Git mirrors (FLYDSL_GIT_MIRRORS): git's own ``url.<TO>.insteadOf <FROM>``, handed to every git command of a
run and of its build scripts through GIT_CONFIG_COUNT/KEY/VALUE, so no git config file is written."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ensure_flydsl.settings import GitMirrors, git_config_count
from ensure_flydsl.support.processes import network_silence_s

# curl's own stall limit for http(s) (git's http.lowSpeedLimit/Time): under 1 byte/s for the silence limit.
LOW_SPEED_LIMIT = "1"


def is_local(url: str) -> bool:
    return url.startswith(("/", "file://"))


def config_entries(mirrors: GitMirrors) -> List[Tuple[str, str]]:
    entries = [(f"url.{to}.insteadOf", source) for source, to in mirrors]
    if any(is_local(to) for _, to in mirrors):
        # git >= 2.38 refuses file:// submodules by default (CVE-2022-39253); the user chose this local mirror.
        entries.append(("protocol.file.allow", "always"))
    return entries


def _appended(env: Dict[str, str], first: int, entries: List[Tuple[str, str]]) -> Dict[str, str]:
    """``env`` with ``entries`` as GIT_CONFIG_KEY_n/VALUE_n from ``first`` on, after the caller's own."""
    for index, (key, value) in enumerate(entries, start=first):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_CONFIG_COUNT"] = str(first + len(entries))
    return env


def with_mirrors(environ: Mapping[str, str], mirrors: GitMirrors) -> Dict[str, str]:
    """A copy of ``environ`` whose git commands apply ``mirrors``."""
    if not mirrors:
        return dict(environ)
    return _appended(dict(environ), git_config_count(environ), config_entries(mirrors))


def with_network_limits(environ: Dict[str, str]) -> Dict[str, str]:
    """``environ`` with git's http low-speed limits (a transfer under 1 byte/s for the network silence limit
    is given up) appended to its GIT_CONFIG_COUNT entries, as the mirrors are.  The caller's
    GIT_HTTP_LOW_SPEED_LIMIT/TIME still win; a GIT_CONFIG_COUNT that is not a number is left to git."""
    raw = environ.get("GIT_CONFIG_COUNT", "").strip()
    if raw and not raw.isdigit():
        return environ
    seconds = max(1, int(network_silence_s(environ)))
    return _appended(environ, int(raw or "0"), [("http.lowSpeedLimit", LOW_SPEED_LIMIT),
                                                ("http.lowSpeedTime", str(seconds))])


def rewrite(url: str, mirrors: GitMirrors) -> Tuple[str, Optional[Tuple[str, str]]]:
    """The URL git uses for ``url`` and the mirror it went through (None: none); the longest FROM wins."""
    matches = [(source, to) for source, to in mirrors if url.startswith(source)]
    if not matches:
        return url, None
    source, to = max(matches, key=lambda pair: len(pair[0]))
    return to + url[len(source):], (source, to)


def describe(url: str, mirrors: GitMirrors, label: str = "FLYDSL_GIT_MIRRORS") -> str:
    where, mirror = rewrite(url, mirrors)
    if mirror is None:
        return url
    return f"{url} through the mirror {where} ({label} {mirror[0]}={mirror[1]})"
