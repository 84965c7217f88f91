"""The one rule for a full file system (support/space.py, errors.py: disk_full_error): which errors are one
(ENOSPC and EDQUOT, not a file-size limit or a refusal), the exit code per stage, and the words of its line.
The scenarios meet ENOSPC on a real tmpfs (tests/scenarios/test_full_disk.py); a quota cannot be mounted
here (this kernel's tmpfs has no quota support, and root ignores quotas), so EDQUOT's words are checked here
on the errors as the kernel raises them."""

from __future__ import annotations

import errno
import os
import re

import pytest

from ensure_flydsl.errors import ExitCode, Stage, disk_full_error
from ensure_flydsl.runs.markers import marker_unwritten
from ensure_flydsl.support import space


def _error(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_file_system_or_quota_is_one(code: int) -> None:
    assert space.is_full(_error(code, "/x"))


@pytest.mark.parametrize("code", [errno.EFBIG, errno.EACCES, errno.EROFS, errno.EIO])
def test_other_errors_are_not(code: int, tmp_path: "os.PathLike[str]") -> None:
    assert not space.is_full(_error(code, "/x"))
    assert disk_full_error(_error(code, str(tmp_path)), Stage.LOCK) is None


def test_the_stages_that_fill_keep_their_code_the_rest_give_5() -> None:
    own = {Stage.FETCH: 2, Stage.SUBMODULES: 2, Stage.CHECKOUT: 3, Stage.LLVM: 4, Stage.BUILD: 5, Stage.RELEASE: 8,
           Stage.CACHE: 8}
    for stage in [*Stage, None]:
        error = disk_full_error(_error(errno.ENOSPC, "/"), stage)
        assert error is not None and error.code == own.get(stage, ExitCode.FLYDSL_BUILD), stage


def test_the_line_names_the_file_system_and_what_to_do(tmp_path: "os.PathLike[str]") -> None:
    path = os.path.join(str(tmp_path), "base", ".flydsl_build.failed")  # its folder does not exist: df of a parent
    error = disk_full_error(_error(errno.ENOSPC, path), Stage.STARTING)
    assert error is not None and error.code == ExitCode.FLYDSL_BUILD and error.stage == Stage.STARTING
    assert error.meaning == "a full file system" and "\n" not in error.reason
    assert re.fullmatch(rf"no space left on the file system holding {re.escape(path)} \(df: [\d.]+ (B|[KMG]iB) "
                        r"free of [\d.]+ [KMG]iB, mounted at /\S*\); free space there \(`ensure-flydsl clean` "
                        r"removes what this tool made for the root\) and run it again", error.reason), error.reason


def test_a_quota_is_said_as_one(tmp_path: "os.PathLike[str]") -> None:
    error = disk_full_error(_error(errno.EDQUOT, str(tmp_path)), Stage.BUILD)
    assert error is not None and error.code == ExitCode.FLYDSL_BUILD
    assert error.reason.startswith(f"the disk quota is used up on the file system holding {tmp_path} (df: ")
    words = marker_unwritten("/b/.flydsl_build.failed", _error(errno.EDQUOT, "/b/.flydsl_build.failed"))
    assert words == ("the failure marker /b/.flydsl_build.failed could not be written (the disk quota is used up "
                     "there): a poller of it does not see this failure")


def test_an_error_without_a_path_still_says_what_it_is() -> None:
    error = disk_full_error(OSError(errno.ENOSPC, "No space left on device"), None)
    assert error is not None and error.reason.startswith("no space left on a file system this command writes to; ")


@pytest.mark.parametrize("count, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (10 << 10, "10 KiB"),
                                         (2 << 20, "2.0 MiB"), (3 << 29, "1.5 GiB"), (300 << 30, "300 GiB")])
def test_sizes_as_df_says_them(count: int, text: str) -> None:
    assert space.size_text(count, df=True) == text


def test_the_mount_point_of_a_path_not_yet_made() -> None:
    assert space.mount_point("/proc/no/such/thing") == "/proc"
