"""The failure marker reads back at one place, field by field (``runs/markers.py: FailureMarker``): what
``write_failure_marker`` wrote comes back whole, and a field of the wrong type reads as not recorded."""

from __future__ import annotations

import json
import os

from ensure_flydsl.errors import Stage
from ensure_flydsl.runs.markers import (
    Failure,
    read_failure_marker,
    withdraw_failure_marker,
    write_failure_marker,
)


def test_what_is_written_reads_back(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), ".flydsl_build.failed")
    write_failure_marker(path, stage=Stage.BUILD, exit_code=5, reason="build.sh failed", hint="read the log",
                         log="/x/ensure_flydsl.log", log_tail=["a", "b"], run_id="r1", request={"root": "/x/R"})
    marker = read_failure_marker(path)
    assert marker is not None and marker.failure == Failure(Stage.BUILD, 5, "build.sh failed", "read the log")
    assert (marker.request, marker.run_id, marker.log, marker.log_tail) == ({"root": "/x/R"}, "r1",
                                                                            "/x/ensure_flydsl.log", ("a", "b"))
    assert marker.names("/x/R") and not marker.names("/x/other")
    assert not withdraw_failure_marker(path, "/x/other") and os.path.exists(path)  # a sibling's stays
    assert withdraw_failure_marker(path, "/x/R") and not os.path.exists(path)


def test_wrong_types_read_as_not_recorded(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "marker")
    with open(path, "w") as handle:
        json.dump({"exit_code": 0, "request": "R", "run_id": 7, "log": ["x"], "log_tail": "tail"}, handle)
    marker = read_failure_marker(path)
    assert marker is not None and marker.failure is None  # exit 0 is no failure a run records
    assert (marker.request, marker.run_id, marker.log, marker.log_tail) == (None, None, "", ())
    assert marker.names("/any/root")  # one that names no request cannot say it is another root's
    with open(path, "w") as handle:
        handle.write("[1, 2]")
    assert read_failure_marker(path) is None and read_failure_marker(path + ".absent") is None
