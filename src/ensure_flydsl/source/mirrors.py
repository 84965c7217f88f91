"""Git mirrors (FLYDSL_GIT_MIRRORS): git's own URL rewriting, ``url.<TO>.insteadOf <FROM>``, handed to every
git command of a run and of the build scripts it runs through the environment (GIT_CONFIG_COUNT,
GIT_CONFIG_KEY_n, GIT_CONFIG_VALUE_n), so that nothing is written to any git config file.  git hands these
variables on to the commands it runs itself (submodule clones), as the scripts' shells do."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

from ensure_flydsl.settings import GitMirrors, git_config_count
from ensure_flydsl.support.processes import network_silence_s

# curl's own stall limit for http(s) (git's http.lowSpeedLimit/Time): under 1 byte/s for the silence limit.
LOW_SPEED_LIMIT = "1"


def is_local(url: str) -> bool:
    return url.startswith(("/", "file://"))


def config_entries(mirrors: GitMirrors) -> List[Tuple[str, str]]:
    """(key, value) of git's configuration that applies the mirrors."""
    entries = [(f"url.{to}.insteadOf", source) for source, to in mirrors]
    if any(is_local(to) for _, to in mirrors):
        # git >= 2.38 refuses file:// submodules by default (CVE-2022-39253); the user chose this local mirror.
        entries.append(("protocol.file.allow", "always"))
    return entries


def with_mirrors(environ: Mapping[str, str], mirrors: GitMirrors) -> Dict[str, str]:
    """A copy of ``environ`` whose git commands apply ``mirrors``: the caller's own GIT_CONFIG_* entries
    stay as they are and come first; ours are appended after them."""
    env = dict(environ)
    if not mirrors:
        return env
    first = git_config_count(environ)
    entries = config_entries(mirrors)
    for index, (key, value) in enumerate(entries, start=first):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_CONFIG_COUNT"] = str(first + len(entries))
    return env


def with_network_limits(environ: Dict[str, str]) -> Dict[str, str]:
    """``environ`` with git's http low-speed limits (``http.lowSpeedLimit``/``http.lowSpeedTime``: a transfer
    under 1 byte/s for the network silence limit is given up) appended to its GIT_CONFIG_COUNT entries, as
    the mirrors are: never written to a config file, and handed on to what git runs (submodule clones) and
    to the build scripts' git commands.  The caller's GIT_HTTP_LOW_SPEED_LIMIT/TIME still win (git reads
    them after its configuration).  A GIT_CONFIG_COUNT that is not a number is left to git to refuse."""
    raw = environ.get("GIT_CONFIG_COUNT", "").strip()
    if raw and not raw.isdigit():
        return environ
    first = int(raw or "0")
    seconds = max(1, int(network_silence_s(environ)))
    entries = [("http.lowSpeedLimit", LOW_SPEED_LIMIT), ("http.lowSpeedTime", str(seconds))]
    for index, (key, value) in enumerate(entries, start=first):
        environ[f"GIT_CONFIG_KEY_{index}"] = key
        environ[f"GIT_CONFIG_VALUE_{index}"] = value
    environ["GIT_CONFIG_COUNT"] = str(first + len(entries))
    return environ


def rewrite(url: str, mirrors: GitMirrors) -> Tuple[str, Optional[Tuple[str, str]]]:
    """The URL git uses for ``url`` and the mirror it went through (None: no FROM is a prefix of it).  As
    git decides: the longest FROM that starts the URL wins."""
    matches = [(source, to) for source, to in mirrors if url.startswith(source)]
    if not matches:
        return url, None
    source, to = max(matches, key=lambda pair: len(pair[0]))
    return to + url[len(source):], (source, to)


def describe(url: str, mirrors: GitMirrors, label: str = "FLYDSL_GIT_MIRRORS") -> str:
    """``url``, and where git fetches it from when a mirror applies: for messages."""
    where, mirror = rewrite(url, mirrors)
    if mirror is None:
        return url
    return f"{url} through the mirror {where} ({label} {mirror[0]}={mirror[1]})"
