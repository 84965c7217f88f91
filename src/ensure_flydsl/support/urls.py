"""URLs as messages show them."""

from __future__ import annotations

import urllib.parse


def shown_location(location: str) -> str:
    """``location`` as messages, logs and markers show it: a password in a URL (``ftp://user:pw@host/``)
    replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(location)
        if parts.password is None:
            return location
    except ValueError:
        return location
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
