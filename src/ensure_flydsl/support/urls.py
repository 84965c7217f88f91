"""URLs as messages show them, and when two name one repository."""

from __future__ import annotations

import os
import re
import urllib.parse

# scheme://user:password@ where urlsplit refuses the rest (a host NFKC turns into "/", "?", "#", "@" or ":")
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#@:]*):[^/?#]*@")


def shown_location(location: str) -> str:
    """``location`` as messages, logs and markers show it: a URL's password replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(location)
        if parts.password is None:
            return location
    except ValueError:
        return _USERINFO.sub(r"\1:***@", location)
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def repo_identity(repo: str) -> str:
    """The repository as a name every host agrees on: host and path, no scheme, no ``.git``, no user."""
    text = repo.strip().rstrip("/")
    text = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text)  # https://, ssh://, file://
    text = re.sub(r"^[^@/]+@", "", text)  # user@ of ssh and scp-like addresses
    text = re.sub(r"^([^/:]+):(?!\d)", r"\1/", text)  # scp-like host:path
    text = text[:-4] if text.endswith(".git") else text
    host, _, path = text.partition("/")
    return (host.lower() + "/" + path) if path else host.lower()


def same_repo(url_a: str, url_b: str) -> bool:
    """Whether two repository addresses name one repository (``.git``, ``file://`` and slashes aside)."""

    def norm(url: str) -> str:
        url = url.strip().removeprefix("file://").rstrip("/").removesuffix(".git")
        url = os.path.normpath(url) if url.startswith("/") else url
        return url.rstrip("/").lower() if "://" in url or "@" in url else url.rstrip("/")

    return norm(url_a) == norm(url_b)
