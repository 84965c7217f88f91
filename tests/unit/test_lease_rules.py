"""The rules a build lease record is read and written by, which other hosts rely on:

- FLYDSL_HOST_ID is taken exactly when a lease record carrying it reads back as that host's."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from ensure_flydsl.binary_cache.lease import LeaseRecord
from ensure_flydsl.errors import BadInput
from ensure_flydsl.setting_values import check_host_id

KEY = "ab" * 32


HOST_IDS = st.one_of(st.text(max_size=250), st.text(min_size=195, max_size=205),
                     st.sampled_from(["h" * 200, "h" * 201, "a\nb", "tab\there", "é" * 200, "\u00a0x", "x\udcff"]))


@settings(max_examples=300, deadline=None)
@given(value=HOST_IDS)
def test_a_host_id_is_taken_exactly_when_a_lease_record_carries_it(value: str) -> None:
    try:
        check_host_id({"FLYDSL_HOST_ID": value})
        taken = True
    except BadInput as exc:
        assert exc.setting == "FLYDSL_HOST_ID" and "\n" not in exc.reason
        taken = False
    if value == "":
        assert taken  # an empty variable is the default: the host name
        return
    record = LeaseRecord("tree", KEY, 1, value, "r", 1, time.time(), "x")
    read = LeaseRecord.from_bytes(record.to_bytes(), "tree", KEY, 1)
    assert taken == (read.invalid is None)
    if taken:
        assert read.host == value
