"""A cache URL's password never reaches a message, a log or a marker: messages name the location as
``shown_location`` gives it.  (The scenario in tests/scenarios/test_cache_trust.py shows it end to end.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ensure_flydsl.support.urls import shown_location
from ensure_flydsl.trees.backends import open_store


@pytest.mark.parametrize("location,shown", [
    ("ftp://user:secret@host:21/cache", "ftp://user:***@host:21/cache"),
    ("sftp://:secret@host/cache", "sftp://:***@host/cache"),
    ("http://user:secret@[::1]:9/cache", "http://user:***@[::1]:9/cache"),
    ("ftp://user:sec@ret@host/cache", "ftp://user:***@host/cache"),
    ("ftp://user@host/cache", "ftp://user@host/cache"),
    ("ftp://user:pa\u2a74ss@host/cache", "ftp://user:***@host/cache"),  # urlsplit refuses it (NFKC "::=")
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("/srv/cache", "/srv/cache"),
])
def test_a_password_is_replaced(location: str, shown: str) -> None:
    assert shown_location(location) == shown


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="@/:?#[]"), min_size=1))
def test_no_password_survives(password: str) -> None:
    shown = shown_location(f"ftp://user:{password}@host/cache")
    assert shown == "ftp://user:***@host/cache"


def test_a_store_names_its_location_without_the_password() -> None:
    store = open_store("ftp://user:secret@127.0.0.1:9/cache")  # nothing listens on port 9: down at once
    assert store.location == "ftp://user:***@127.0.0.1:9/cache"
    assert "secret" not in str(getattr(store, "down", ""))
