"""An error is never changed once raised: a reason or hint added later, and the run's id, go on a copy."""

from __future__ import annotations

import errno

from ensure_flydsl.errors import BadInput, EnsureError, ExitCode, Stage, disk_full_error


def test_amended_is_a_copy_and_the_raised_error_stays_as_it_was() -> None:
    raised = BadInput("FLYDSL_JOBS", "x", "a whole number >= 1")
    amended = raised.amended(reason=raised.reason + "; and the marker could not be written", hint="fix it")
    assert type(amended) is BadInput and amended.setting == "FLYDSL_JOBS"  # the subclass and its fields kept
    assert amended.code == ExitCode.BAD_INPUT and amended.stage is Stage.SETTINGS
    assert str(amended).endswith("; and the marker could not be written") and amended.hint == "fix it"
    assert str(raised) == "FLYDSL_JOBS='x' is not allowed: a whole number >= 1" and raised.hint == ""
    assert raised.args == (raised.reason,) and amended.args == (amended.reason,)


def test_of_run_names_the_run_on_a_copy() -> None:
    raised = EnsureError(ExitCode.FETCH, "fetch failed", stage=Stage.FETCH, hint="check the URL", detail="out")
    failed = raised.of_run("run-1", 1.5, {"answers": False})
    assert (failed.run_id, failed.elapsed_s, failed.installed) == ("run-1", 1.5, {"answers": False})
    assert (failed.reason, failed.hint, failed.detail, failed.stage) == ("fetch failed", "check the URL", "out",
                                                                          Stage.FETCH)
    assert raised.run_id is None and raised.elapsed_s is None and raised.installed is None


def test_a_full_disk_error_says_what_its_code_means_from_the_start() -> None:
    error = disk_full_error(OSError(errno.ENOSPC, "No space left on device", "/nonexistent/x"), Stage.PUBLISH)
    assert error is not None and error.code == ExitCode.FLYDSL_BUILD and error.meaning == "a full file system"
    assert EnsureError(ExitCode.FLYDSL_BUILD, "x").meaning == "FlyDSL build failed"
